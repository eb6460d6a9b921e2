/* parquet_fuzz.c — libFuzzer target for engine/parquet.c: open any bytes as a parquet
 * file, decode every row through the JSON-lines sink, and touch the metadata the Lua
 * binding reads. Seeds in fuzz/corpus/parquet are small files from both fixture writers. */
#include "parquet.h"

#include <string.h>

static int discard(void *ud, const char *s, size_t n) {
  size_t *total = ud;
  if (n && s[n - 1] != '\n') /* every line ends with a newline */
    __builtin_trap();
  *total += n;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  pq_limits lim = {.max_memory = 64u << 20};
  pq_error err;
  pq_file *f = pq_open(data, size, &lim, &err);
  if (!f) {
    if (err.status == PQ_OK || !err.msg[0]) __builtin_trap(); /* a failure always says why */
    return 0;
  }
  size_t sum = 0;
  for (int i = 0; i < f->num_leaves; i++) {
    const pq_node *n = f->leaves[i];
    sum += strlen(n->path) + strlen(pq_type_name(n->type)) + strlen(pq_repetition_name(n->repetition));
    if (pq_logical_name(n)) sum += strlen(pq_logical_name(n));
    for (int g = 0; g < f->num_row_groups; g++) {
      const pq_column_chunk *c = &f->row_groups[g].columns[i];
      sum += strlen(pq_codec_name(c->codec));
      for (int e = 0; e < c->num_encodings; e++) sum += strlen(pq_encoding_name(c->encodings[e]));
    }
  }
  for (int i = 0; i < f->num_kv; i++) sum += f->kv[i].key_len + f->kv[i].value_len;
  size_t total = 0;
  if (pq_write_jsonl(f, discard, &total, &err) < 0 && (err.status == PQ_OK || !err.msg[0])) __builtin_trap();
  pq_close(f);
  return (int)(sum & 0); /* keep sum alive without affecting libFuzzer */
}
