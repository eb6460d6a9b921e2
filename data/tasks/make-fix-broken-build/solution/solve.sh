#!/bin/bash
set -euo pipefail
cd /workspace/calc
cat > Makefile <<'MK'
# Build the calculator.
CC = gcc
CFLAGS = -Wall -O2
DEPFLAGS = -MMD -MP

SRCS = $(wildcard src/*.c)
OBJS = $(patsubst src/%.c,build/%.o,$(SRCS))
DEPS = $(OBJS:.o=.d)

all: calc

calc: $(OBJS)
	$(CC) $(CFLAGS) -o $@ $(OBJS)

build/%.o: src/%.c | build
	$(CC) $(CFLAGS) $(DEPFLAGS) -c $< -o $@

build:
	mkdir -p build

test: calc
	./calc '1+2*3'

clean:
	rm -rf build calc

.PHONY: all test clean

-include $(DEPS)
MK
make -s clean
make -s
