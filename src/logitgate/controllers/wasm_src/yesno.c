/* yesno.c: force a prefix, then generate under a regex until the model ends it (EOS).
 *
 * The module argument is "PREFIX\nREGEX" (default "Answer:\n (yes|no)"). The prefix is spliced in
 * as the model's own tokens; the rest is sampled under the host's mask for the regex. The
 * generated text is stored in the variable "answer" and logged.
 */
#include "logitgate_ctrl.h"

enum { FORCE_PREFIX, GENERATE, DONE };

static char arg[1024] = "Answer:\n (yes|no)";
static int32_t arg_len;
static int32_t prefix_len, regex_start;
static int32_t phase = FORCE_PREFIX;
static int32_t constraint = -1;
static char answer[512];
static int32_t answer_len;
static int32_t tokens[512];

LG_EXPORT("lg_init_prompt") void lg_init_prompt(const int32_t *prompt, int32_t n) {
  (void)prompt;
  (void)n;
  int32_t len = lg_module_arg(arg, sizeof arg - 1);
  if (len > (int32_t)sizeof arg - 1) lg_fail("yesno: the module argument is too long");
  arg_len = len > 0 ? len : lg_strlen(arg);
  prefix_len = 0;
  while (prefix_len < arg_len && arg[prefix_len] != '\n') prefix_len++;
  if (prefix_len == arg_len) lg_fail("yesno: the argument needs a newline between the prefix and the regex");
  regex_start = prefix_len + 1;
  constraint = lg_regex_new(arg + regex_start, arg_len - regex_start);
  if (constraint < 0) lg_fail("yesno: the regex does not compile");
}

LG_EXPORT("lg_pre_process") int32_t lg_pre_process(void) { return phase == DONE ? LG_STOP : LG_CONTINUE; }

LG_EXPORT("lg_mid_process") int32_t lg_mid_process(const int32_t *fork_group, int32_t n) {
  (void)fork_group;
  (void)n;
  if (phase == FORCE_PREFIX) {
    int32_t count = lg_tokenize(arg, prefix_len, tokens, 512);
    if (count < 0 || count > 512) lg_fail("yesno: cannot tokenize the prefix");
    return lg_splice(0, tokens, count);
  }
  if (phase == GENERATE) return lg_sample_constraint(constraint);
  return LG_STOP;
}

static int32_t finish(void) {
  lg_var_set("answer", 6, answer, answer_len);
  lg_print("answer:");
  lg_log(answer, answer_len);
  lg_print("\n");
  phase = DONE;
  return LG_STOP;
}

LG_EXPORT("lg_post_process") int32_t lg_post_process(const int32_t *toks, int32_t n, int32_t backtrack) {
  (void)backtrack;
  if (phase == FORCE_PREFIX) {
    phase = GENERATE;
    return LG_CONTINUE;
  }
  for (int32_t i = 0; i < n; i++) {
    if (!lg_constraint_accept(constraint, toks[i])) lg_fail("yesno: the sampled token breaks the regex");
    if (toks[i] == lg_eos_token()) return finish();
    int32_t room = (int32_t)sizeof answer - answer_len;
    int32_t len = lg_token_bytes(toks[i], answer + answer_len, room);
    if (len > room) lg_fail("yesno: the answer is too long");
    answer_len += len;
  }
  return LG_CONTINUE;
}
