#!/bin/bash
# Delete old backups, keeping the newest N.
cd $1
ls -t backup-* | tail -n +$(($2 + 1)) | xargs rm -v
