/* digits.c: a controller with its own automaton: " [0-9]+" as a DFA table in its memory, masked by
 * the host's walk of the token trie (lg_dfa_mask) and stepped here byte by byte over each token.
 *
 * Generates until EOS (allowed once a digit was written) or 8 tokens. On its first step it stores
 * the mask in the variable "dfa_mask" and the host regex's mask for the same language in
 * "regex_mask" (int32 words, little-endian), so the two can be compared.
 */
#include "logitgate_ctrl.h"

#define N_STATES 3
#define MAX_WORDS 16384 /* vocabularies up to 512k tokens */

static int32_t table[N_STATES][256];
static uint8_t accept[N_STATES] = {0, 0, 1};
static int32_t state;
static int32_t steps;
static int32_t mask[MAX_WORDS];

LG_EXPORT("lg_init_prompt") void lg_init_prompt(const int32_t *prompt, int32_t n) {
  (void)prompt;
  (void)n;
  if (lg_mask_words() > MAX_WORDS) lg_fail("digits: vocabulary too large");
  for (int s = 0; s < N_STATES; s++)
    for (int b = 0; b < 256; b++) table[s][b] = -1;
  table[0][' '] = 1;
  for (int d = '0'; d <= '9'; d++) table[1][d] = table[2][d] = 2;
}

LG_EXPORT("lg_pre_process") int32_t lg_pre_process(void) { return state < 0 ? LG_STOP : LG_CONTINUE; }

static void store_mask(const char *name) {
  lg_var_set(name, lg_strlen(name), (const char *)mask, lg_mask_words() * 4);
}

LG_EXPORT("lg_mid_process") int32_t lg_mid_process(const int32_t *group, int32_t n) {
  (void)group;
  (void)n;
  if (steps == 0) {
    int32_t h = lg_regex_new(" [0-9]+", 7);
    if (h < 0) lg_fail("digits: regex");
    lg_constraint_mask(h, mask);
    store_mask("regex_mask");
    lg_constraint_free(h);
  }
  lg_dfa_mask(&table[0][0], N_STATES, accept, state, mask);
  if (steps == 0) store_mask("dfa_mask");
  return lg_sample_mask(mask);
}

LG_EXPORT("lg_post_process") int32_t lg_post_process(const int32_t *toks, int32_t n, int32_t backtrack) {
  (void)backtrack;
  for (int32_t i = 0; i < n; i++) {
    if (toks[i] == lg_eos_token()) {
      state = -1;
      return LG_STOP;
    }
    char piece[64];
    int32_t len = lg_token_bytes(toks[i], piece, sizeof piece);
    if (len > (int32_t)sizeof piece) lg_fail("digits: token too long");
    for (int32_t k = 0; k < len; k++) {
      state = table[state][(uint8_t)piece[k]];
      if (state < 0) lg_fail("digits: the token left the automaton");
    }
  }
  if (++steps >= 8) {
    state = -1;
    return LG_STOP;
  }
  return LG_CONTINUE;
}
