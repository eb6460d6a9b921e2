/* check.h: the counters and CHECK macro every C unit test in test/c uses. CHECK(cond, fmt, ...)
 * counts a pass, or counts a failure and prints the file, line, condition and message. */
#ifndef CSENG_TEST_CHECK_H
#define CSENG_TEST_CHECK_H

#include <stdio.h>

static int passed, failed;

#define CHECK(cond, ...)                                     \
  do {                                                       \
    if (cond) {                                              \
      passed++;                                              \
    } else {                                                 \
      failed++;                                              \
      printf("FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
      printf(__VA_ARGS__);                                   \
      printf("\n");                                          \
    }                                                        \
  } while (0)

#endif
