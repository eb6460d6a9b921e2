#!/bin/bash
set -e
cd /workspace
fletch $(ls data/* | sort) > checksums.txt
