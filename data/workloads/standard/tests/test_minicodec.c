/* The minicodec test suite: one TEST(name) per test (the arena counts them), run in order. */
#include <stdio.h>
#include <string.h>
#include "minicodec.h"

static int passed, failed, current_failed;

#define CHECK(cond) do { if (!(cond)) { \
  fprintf(stderr, "  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); current_failed = 1; } } while (0)
#define TEST(name) static void name(void)
#define RUN(name) do { current_failed = 0; name(); \
  if (current_failed) { failed++; printf("FAIL %s\n", #name); } else { passed++; printf("ok   %s\n", #name); } } while (0)

static const char *enc(const char *s) {
  static char buf[256];
  mc_b64_encode((const unsigned char *)s, strlen(s), buf);
  return buf;
}

static long dec(const char *s, char *out) {
  long n = mc_b64_decode(s, strlen(s), (unsigned char *)out);
  if (n >= 0) out[n] = '\0';
  return n;
}

TEST(b64_empty) { CHECK(strcmp(enc(""), "") == 0); CHECK(mc_b64_encoded_len(0) == 0); }
TEST(b64_rfc4648_vectors) {
  CHECK(strcmp(enc("f"), "Zg==") == 0);
  CHECK(strcmp(enc("fo"), "Zm8=") == 0);
  CHECK(strcmp(enc("foo"), "Zm9v") == 0);
  CHECK(strcmp(enc("foob"), "Zm9vYg==") == 0);
  CHECK(strcmp(enc("fooba"), "Zm9vYmE=") == 0);
  CHECK(strcmp(enc("foobar"), "Zm9vYmFy") == 0);
}
TEST(b64_decode_vectors) {
  char out[64];
  CHECK(dec("Zm9vYmFy", out) == 6 && strcmp(out, "foobar") == 0);
  CHECK(dec("Zm9vYg==", out) == 4 && strcmp(out, "foob") == 0);
  CHECK(dec("Zm8=", out) == 2 && strcmp(out, "fo") == 0);
}
TEST(b64_round_trip_all_bytes) {
  unsigned char in[256], back[256];
  char text[400];
  for (int i = 0; i < 256; i++) in[i] = (unsigned char)i;
  for (size_t n = 0; n <= 256; n += 37) {
    size_t m = mc_b64_encode(in, n, text);
    CHECK(m == mc_b64_encoded_len(n));
    CHECK(mc_b64_decode(text, m, back) == (long)n);
    CHECK(memcmp(in, back, n) == 0);
  }
}
TEST(b64_refuses_bad_length) { char out[8]; CHECK(dec("Zm9", out) == -1); }
TEST(b64_refuses_bad_char) { char out[8]; CHECK(dec("Zm9*", out) == -1); CHECK(dec("Zm 9", out) == -1); }
TEST(b64_refuses_misplaced_padding) {
  char out[16];
  CHECK(dec("Z===", out) == -1);
  CHECK(dec("Zg==Zm9v", out) == -1);
  CHECK(dec("Zm=v", out) == -1);
}
TEST(b64_high_bytes) {
  const unsigned char in[] = { 0xff, 0xfe, 0xfd };
  char text[8];
  mc_b64_encode(in, 3, text);
  CHECK(strcmp(text, "//79") == 0);
}

static uint32_t crc(const char *s) { return mc_crc32(0, (const unsigned char *)s, strlen(s)); }

TEST(crc32_empty) { CHECK(crc("") == 0); }
TEST(crc32_check_value) { CHECK(crc("123456789") == 0xCBF43926u); }
TEST(crc32_known_strings) {
  CHECK(crc("a") == 0xE8B7BE43u);
  CHECK(crc("The quick brown fox jumps over the lazy dog") == 0x414FA339u);
}
TEST(crc32_incremental) {
  const char *s = "The quick brown fox jumps over the lazy dog";
  uint32_t c = mc_crc32(0, (const unsigned char *)s, 10);
  c = mc_crc32(c, (const unsigned char *)s + 10, strlen(s) - 10);
  CHECK(c == crc(s));
}
TEST(crc32_zero_bytes) {
  unsigned char z[32] = { 0 };
  CHECK(mc_crc32(0, z, 32) == 0x190A55ADu);
}

static long u8(const char *s) { return mc_utf8_count((const unsigned char *)s, strlen(s)); }

TEST(utf8_ascii) { CHECK(u8("hello") == 5); CHECK(u8("") == 0); }
TEST(utf8_multibyte) {
  CHECK(u8("caf\xc3\xa9") == 4);          /* é */
  CHECK(u8("\xe2\x82\xac") == 1);         /* € */
  CHECK(u8("\xf0\x9f\x98\x80!") == 2);    /* U+1F600 */
}
TEST(utf8_refuses_overlong) { CHECK(u8("\xc0\xaf") == -1); CHECK(u8("\xe0\x80\xaf") == -1); }
TEST(utf8_refuses_surrogates) { CHECK(u8("\xed\xa0\x80") == -1); }
TEST(utf8_refuses_past_max) { CHECK(u8("\xf4\x90\x80\x80") == -1); CHECK(u8("\xf8\x88\x80\x80\x80") == -1); }
TEST(utf8_refuses_cut_sequence) { CHECK(u8("ab\xe2\x82") == -1); CHECK(u8("\xc3") == -1); }
TEST(utf8_refuses_stray_continuation) { CHECK(u8("\x80") == -1); CHECK(u8("a\xbf" "b") == -1); }

TEST(kv_basic) {
  char v[32];
  CHECK(mc_kv_get("a=1\nb=two\n", "b", v, sizeof v) == 3 && strcmp(v, "two") == 0);
  CHECK(mc_kv_get("a=1\nb=two\n", "a", v, sizeof v) == 1 && strcmp(v, "1") == 0);
}
TEST(kv_trims_and_skips_comments) {
  char v[32];
  CHECK(mc_kv_get("# a=no\n  a  =  yes please \r\n", "a", v, sizeof v) == 10);
  CHECK(strcmp(v, "yes please") == 0);
}
TEST(kv_missing_key) {
  char v[8];
  CHECK(mc_kv_get("ab=1\n", "a", v, sizeof v) == -1);
  CHECK(mc_kv_get("", "a", v, sizeof v) == -1);
  CHECK(mc_kv_get("a\n", "a", v, sizeof v) == -1);
}
TEST(kv_last_line_wins) {
  char v[8];
  CHECK(mc_kv_get("a=1\na=2", "a", v, sizeof v) == 1 && strcmp(v, "2") == 0);
}
TEST(kv_value_too_long) {
  char v[4];
  CHECK(mc_kv_get("a=12345\n", "a", v, sizeof v) == -2);
  CHECK(mc_kv_get("a=123\n", "a", v, sizeof v) == 3);
}
TEST(kv_empty_value_and_equals_in_value) {
  char v[16];
  CHECK(mc_kv_get("a=\n", "a", v, sizeof v) == 0 && v[0] == '\0');
  CHECK(mc_kv_get("url=x=y\n", "url", v, sizeof v) == 3 && strcmp(v, "x=y") == 0);
}

int main(void) {
  RUN(b64_empty);
  RUN(b64_rfc4648_vectors);
  RUN(b64_decode_vectors);
  RUN(b64_round_trip_all_bytes);
  RUN(b64_refuses_bad_length);
  RUN(b64_refuses_bad_char);
  RUN(b64_refuses_misplaced_padding);
  RUN(b64_high_bytes);
  RUN(crc32_empty);
  RUN(crc32_check_value);
  RUN(crc32_known_strings);
  RUN(crc32_incremental);
  RUN(crc32_zero_bytes);
  RUN(utf8_ascii);
  RUN(utf8_multibyte);
  RUN(utf8_refuses_overlong);
  RUN(utf8_refuses_surrogates);
  RUN(utf8_refuses_past_max);
  RUN(utf8_refuses_cut_sequence);
  RUN(utf8_refuses_stray_continuation);
  RUN(kv_basic);
  RUN(kv_trims_and_skips_comments);
  RUN(kv_missing_key);
  RUN(kv_last_line_wins);
  RUN(kv_value_too_long);
  RUN(kv_empty_value_and_equals_in_value);
  printf("tests: %d passed, %d failed\n", passed, failed);
  return failed ? 1 : 0;
}
