/* forks.c: one draft, three branches, shared variables, a branch that waits for another.
 *
 *   1. splice " draft" (before forking: the clones inherit its length from the parent's memory)
 *   2. fork into 3; branch k (its index in the fork group) replaces the draft, a splice with
 *      backtrack, by " k="
 *   3. generate under the regex "[0-9]+;" (one constraint handle, compiled before the fork and
 *      cloned with each instance) until it is complete; store the digits in variable "bk" and
 *      append "k=digits;" to the shared variable "results"
 *   4. branches 1 and 2 stop; branch 0 suspends until "b2" is set, then splices " got <b2>" and stops
 */
#include "logitgate_ctrl.h"

enum { DRAFT, FORK, RELABEL, GENERATE, WAIT, REPORT, DONE };

static int32_t phase = DRAFT;
static int32_t draft_len;
static int32_t branch = -1;
static int32_t constraint = -1;
static int32_t waited;
static char digits[64];
static int32_t digits_len;
static char text[128];
static int32_t tokens[128];

LG_EXPORT("lg_init_prompt") void lg_init_prompt(const int32_t *prompt, int32_t n) {
  (void)prompt;
  (void)n;
  constraint = lg_regex_new("[0-9]+;", 7);
  if (constraint < 0) lg_fail("forks: bad regex");
}

LG_EXPORT("lg_pre_process") int32_t lg_pre_process(void) {
  if (phase == FORK) {
    phase = RELABEL; /* the clones start from here too */
    return LG_FORK(3);
  }
  if (phase == WAIT) {
    if (lg_var_get("b2", 2, 0, 0) < 0) {
      if (!waited++) lg_print("branch 0 waits for b2\n");
      return LG_SUSPEND;
    }
    phase = REPORT;
  }
  return phase == DONE ? LG_STOP : LG_CONTINUE;
}

static int32_t splice_text(int32_t backtrack, const char *s, int32_t len) {
  int32_t n = lg_tokenize(s, len, tokens, 128);
  if (n < 0 || n > 128) lg_fail("forks: cannot tokenize");
  return lg_splice(backtrack, tokens, n);
}

LG_EXPORT("lg_mid_process") int32_t lg_mid_process(const int32_t *group, int32_t n) {
  switch (phase) {
    case DRAFT:
      return splice_text(0, " draft", 6);
    case RELABEL: {
      int32_t me = lg_self_seq_id();
      for (int32_t i = 0; i < n; i++)
        if (group[i] == me) branch = i;
      if (branch < 0) lg_fail("forks: not in my own fork group");
      text[0] = ' ';
      text[1] = (char)('0' + branch);
      text[2] = '=';
      return splice_text(draft_len, text, 3);
    }
    case GENERATE:
      return lg_sample_constraint(constraint);
    case REPORT: {
      int32_t len = 5;
      __builtin_memcpy(text, " got ", 5);
      len += lg_var_get("b2", 2, text + len, (int32_t)sizeof text - len);
      return splice_text(0, text, len);
    }
    default:
      return LG_STOP;
  }
}

static void store_result(void) {
  char name[2] = {'b', (char)('0' + branch)};
  lg_var_set(name, 2, digits, digits_len);
  char entry[80];
  entry[0] = (char)('0' + branch);
  entry[1] = '=';
  __builtin_memcpy(entry + 2, digits, (size_t)digits_len);
  entry[2 + digits_len] = ';';
  lg_var_append("results", 7, entry, digits_len + 3);
}

LG_EXPORT("lg_post_process") int32_t lg_post_process(const int32_t *toks, int32_t n, int32_t backtrack) {
  (void)backtrack;
  switch (phase) {
    case DRAFT:
      draft_len = n;
      phase = FORK;
      return LG_CONTINUE;
    case RELABEL:
      phase = GENERATE;
      return LG_CONTINUE;
    case GENERATE:
      for (int32_t i = 0; i < n; i++) {
        if (!lg_constraint_accept(constraint, toks[i])) lg_fail("forks: the token breaks the regex");
        char piece[64];
        int32_t len = lg_token_bytes(toks[i], piece, sizeof piece);
        for (int32_t k = 0; k < len && k < (int32_t)sizeof piece; k++)
          if (piece[k] >= '0' && piece[k] <= '9' && digits_len < (int32_t)sizeof digits) digits[digits_len++] = piece[k];
      }
      if (!lg_constraint_is_accepting(constraint)) return LG_CONTINUE;
      store_result();
      phase = branch == 0 ? WAIT : DONE;
      return phase == DONE ? LG_STOP : LG_CONTINUE;
    case REPORT:
      phase = DONE;
      return LG_STOP;
    default:
      return LG_CONTINUE;
  }
}
