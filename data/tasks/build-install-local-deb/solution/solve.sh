#!/bin/bash
set -e
rot < /workspace/words.txt > /workspace/encoded.txt
