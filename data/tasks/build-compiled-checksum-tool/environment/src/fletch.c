/* fletch: the Fletcher-32 checksum of each file named on the command line,
 * printed as "<8 hex digits>  <name>". Odd lengths are padded with a zero byte. */
#include <stdio.h>
#include <stdint.h>

static int sum(const char *path, uint32_t *out) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  uint32_t a = 0xffff, b = 0xffff;
  int c1, c2;
  while ((c1 = fgetc(f)) != EOF) {
    c2 = fgetc(f);
    uint16_t w = (uint16_t)((c1 << 8) | (c2 == EOF ? 0 : c2));
    a = (a + w) % 65535;
    b = (b + a) % 65535;
    if (c2 == EOF) break;
  }
  fclose(f);
  *out = (b << 16) | a;
  return 0;
}

int main(int argc, char **argv) {
  int rc = 0;
  for (int i = 1; i < argc; i++) {
    uint32_t s;
    if (sum(argv[i], &s) != 0) { perror(argv[i]); rc = 1; continue; }
    printf("%08x  %s\n", s, argv[i]);
  }
  return rc;
}
