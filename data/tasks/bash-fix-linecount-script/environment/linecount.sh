#!/bin/bash
# Print "<lines> <relative path>" for every .txt file under DIR, biggest first.
dir=$1
for f in $(find $dir -name *.txt); do
    n=$(wc -l < $f)
    echo "$n ${f#$dir/}"
done | sort -rn
