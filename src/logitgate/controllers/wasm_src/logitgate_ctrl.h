/* logitgate_ctrl.h: the ABI of logitgate's Wasm controllers, for C (see logitgate/controllers/wasm.py).
 *
 * A controller is a single C file that includes this header and defines the four calls:
 *
 *   LG_EXPORT("lg_init_prompt")  void    lg_init_prompt(const int32_t *prompt, int32_t n);
 *   LG_EXPORT("lg_pre_process")  int32_t lg_pre_process(void);     LG_CONTINUE, LG_STOP, LG_SUSPEND, LG_FORK(n)
 *   LG_EXPORT("lg_mid_process")  int32_t lg_mid_process(const int32_t *fork_group, int32_t n);
 *                                        return lg_sample_constraint(h) / lg_sample_mask(words) / lg_sample_any()
 *                                        / lg_splice(backtrack, tokens, n) / LG_STOP
 *   LG_EXPORT("lg_post_process") int32_t lg_post_process(const int32_t *tokens, int32_t n, int32_t backtrack);
 *                                        LG_CONTINUE or LG_STOP
 *
 * Build: logitgate.controllers.wasm.build_c(["my.c"], "my.wasm") (zig's clang, or clang --target=wasm32).
 * Everything here is freestanding: no libc, no WASI; the host functions below are all there is.
 * The header defines lg_alloc (the buffer the host copies arrays into) and small helpers, so include
 * it in exactly one .c file (define LG_NO_DEFAULT_ALLOC to write your own lg_alloc).
 */
#ifndef LOGITGATE_CTRL_H
#define LOGITGATE_CTRL_H

#include <stddef.h>
#include <stdint.h>

#define LG_IMPORT(name) __attribute__((import_module("logitgate"), import_name(name)))
#define LG_EXPORT(name) __attribute__((export_name(name)))

/* results of lg_pre_process / lg_post_process / lg_mid_process */
#define LG_STOP 0
#define LG_CONTINUE 1
#define LG_SUSPEND (-1)
#define LG_FORK(n) ((int32_t)(n)) /* n >= 2 sequences: this one and n - 1 clones */

/* -- the tokenizer ------------------------------------------------------------------------- */
LG_IMPORT("vocab_size") int32_t lg_vocab_size(void);  /* token ids are 0 .. vocab_size-1 */
LG_IMPORT("eos_token") int32_t lg_eos_token(void);
/* The bytes of token `tok` (the first `cap` of them copied to `out`); returns their length, -1 for an
 * id outside the vocabulary. Special tokens give their name. */
LG_IMPORT("token_bytes") int32_t lg_token_bytes(int32_t tok, char *out, int32_t cap);
/* The model's tokenization of `len` bytes (the first `cap` ids written to `out`); returns the
 * number of tokens, -1 (and a log line) if the model cannot tokenize them exactly. */
LG_IMPORT("tokenize") int32_t lg_tokenize(const char *data, int32_t len, int32_t *out, int32_t cap);

/* -- this sequence, the request ------------------------------------------------------------ */
LG_IMPORT("self_seq_id") int32_t lg_self_seq_id(void);
/* The argument the module was started with (controller_factory(arg=...)), like lg_token_bytes. */
LG_IMPORT("module_arg") int32_t lg_module_arg(char *out, int32_t cap);
/* Variables shared by all sequences of the request. var_get: the value's length (first `cap`
 * bytes copied), -1 when unset. */
LG_IMPORT("var_get") int32_t lg_var_get(const char *name, int32_t name_len, char *out, int32_t cap);
LG_IMPORT("var_set") void lg_var_set(const char *name, int32_t name_len, const char *val, int32_t len);
LG_IMPORT("var_append") void lg_var_append(const char *name, int32_t name_len, const char *val, int32_t len);
/* Append to this sequence's log (its captured stdout). */
LG_IMPORT("log") void lg_log(const char *text, int32_t len);

/* -- constraints computed by the host (exact token masks without a callback per trie node) --- */
/* Compile a regex (logitgate syntax) into a constraint handle; negative on error (logged). */
LG_IMPORT("regex_new") int32_t lg_regex_new(const char *regex, int32_t len);
/* Write the allowed tokens (bit t%32 of word t/32; EOS when the text so far is complete) into
 * `out`, lg_mask_words() int32 words; returns that number. */
LG_IMPORT("constraint_mask") int32_t lg_constraint_mask(int32_t h, int32_t *out);
LG_IMPORT("constraint_accept") int32_t lg_constraint_accept(int32_t h, int32_t tok); /* 1 or 0 (refused) */
LG_IMPORT("constraint_rollback") int32_t lg_constraint_rollback(int32_t h, int32_t n_tokens); /* 1 or 0 */
LG_IMPORT("constraint_is_accepting") int32_t lg_constraint_is_accepting(int32_t h);
LG_IMPORT("constraint_free") void lg_constraint_free(int32_t h);
/* The mask of a DFA the module defines: `table` is n_states * 256 int32 next states (-1 = dead),
 * `accept` n_states bytes (non-zero: accepting, which allows EOS); the host walks the token trie
 * from `state` and writes lg_mask_words() words into `out`; returns that number. */
LG_IMPORT("dfa_mask")
int32_t lg_dfa_mask(const int32_t *table, int32_t n_states, const uint8_t *accept, int32_t state, int32_t *out);

/* -- what mid_process asks for: each returns LG_CONTINUE, so `return lg_splice(...);` works ------ */
LG_IMPORT("sample_mask") int32_t lg_sample_mask(const int32_t *words); /* lg_mask_words() words, copied */
LG_IMPORT("sample_constraint") int32_t lg_sample_constraint(int32_t h); /* under h's current mask */
LG_IMPORT("splice") int32_t lg_splice(int32_t backtrack, const int32_t *tokens, int32_t n);
static inline int32_t lg_sample_any(void) { return LG_CONTINUE; } /* no mask: any token */

/* -- helpers ------------------------------------------------------------------------------- */
static inline int32_t lg_mask_words(void) { return (lg_vocab_size() + 31) / 32; }

static inline int32_t lg_strlen(const char *s) {
  int32_t n = 0;
  while (s[n]) n++;
  return n;
}

static inline void lg_print(const char *s) { lg_log(s, lg_strlen(s)); }

/* Decimal digits of `v` into `out` (at least 12 bytes); returns their number. */
static inline int32_t lg_itoa(int32_t v, char *out) {
  char tmp[12];
  int32_t n = 0, len = 0;
  uint32_t u = v < 0 ? 0u - (uint32_t)v : (uint32_t)v;
  do { tmp[n++] = (char)('0' + u % 10); u /= 10; } while (u);
  if (v < 0) out[len++] = '-';
  while (n) out[len++] = tmp[--n];
  return len;
}

/* End the call with a trap (the host ends this sequence with the message in its log). */
static inline __attribute__((noreturn)) void lg_fail(const char *msg) {
  lg_print(msg);
  __builtin_trap();
}

#ifndef LG_NO_DEFAULT_ALLOC
/* The host asks for a buffer to copy arrays (prompt, fork group, tokens) into, keeps it, and asks
 * again only for a bigger one: fresh pages at the end of memory, never touched by the module. */
static uint8_t *lg__scratch;
static int32_t lg__scratch_cap;
LG_EXPORT("lg_alloc") void *lg_alloc(int32_t size) {
  if (size > lg__scratch_cap) {
    int32_t pages = (size + 65535) / 65536;
    int32_t old = __builtin_wasm_memory_grow(0, pages);
    if (old < 0) lg_fail("lg_alloc: out of memory");
    lg__scratch = (uint8_t *)((uintptr_t)old * 65536u);
    lg__scratch_cap = pages * 65536;
  }
  return lg__scratch;
}
#endif

#endif /* LOGITGATE_CTRL_H */
