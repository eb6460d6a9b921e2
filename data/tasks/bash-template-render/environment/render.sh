#!/bin/bash
# Render a template: replace {{NAME}} with the value of $NAME.
tpl=$(cat "${1:-/dev/stdin}")
for name in $(echo "$tpl" | grep -o '{{[A-Za-z_][A-Za-z0-9_]*}}' | tr -d '{}' | sort -u); do
    tpl=$(echo "$tpl" | sed "s/{{$name}}/${!name}/g")
done
echo "$tpl"
