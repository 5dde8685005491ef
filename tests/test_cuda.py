"""GPU paths (skipped without CUDA): applying bitmasks to CUDA logits in every float dtype, equal
to the numpy kernel, and the transformers logits processor driving generate() on a CUDA model
(a small Llama initialised at random: no download) with every output valid for its regex."""
from __future__ import annotations

import re

import numpy as np
import pytest

import logitgate

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
@pytest.mark.parametrize("vocab", [170, 49_152 + 64])
def test_apply_on_cuda_matches_numpy(dtype, vocab):
    rng = np.random.default_rng(vocab)
    words = (vocab - 64 + 31) // 32 if vocab > 1000 else (vocab + 31) // 32  # a mask narrower than padded logits
    bm = rng.integers(-(2**31), 2**31, size=(4, words), dtype=np.int64).astype(np.int32)
    logits = rng.standard_normal((4, vocab)).astype(np.float32)
    expected = logits.copy()
    logitgate.apply_token_bitmask_inplace(expected, bm)
    t = torch.from_numpy(logits.copy()).to("cuda", getattr(torch, dtype))
    logitgate.apply_token_bitmask_inplace(t, torch.from_numpy(bm).cuda())
    assert t.device.type == "cuda"
    assert np.array_equal(np.isneginf(t.float().cpu().numpy()), np.isneginf(expected))
    t = torch.from_numpy(logits.copy()).to("cuda", getattr(torch, dtype))
    logitgate.apply_token_bitmask_inplace(t, bm, indices=[1, 3])  # a numpy mask, some rows
    got = t.float().cpu().numpy()
    assert np.isfinite(got[[0, 2]]).all()
    assert np.array_equal(np.isneginf(got[[1, 3]]), np.isneginf(expected[[1, 3]]))
    one = torch.from_numpy(logits[0].copy()).to("cuda", getattr(torch, dtype))
    logitgate.apply_token_bitmask_inplace(one, bm[0])
    assert np.array_equal(np.isneginf(one.float().cpu().numpy()), np.isneginf(expected[0]))


def test_logits_processor_with_a_cuda_model():
    transformers = pytest.importorskip("transformers")
    from logitgate.integrations.transformers import LogitgateLogitsProcessor

    tokens = [bytes([b]) for b in range(256)] + [b"</s>"]
    tok = logitgate.Tokenizer.from_bytes(tokens, eos_token_id=256, special_ids=[256])
    config = transformers.LlamaConfig(vocab_size=257, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=256,
                                      bos_token_id=0, eos_token_id=256, pad_token_id=256)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).to("cuda").eval()
    patterns = [r"[0-9]{3}-[0-9]{4}", r"(cat|dog|bird)s?"]
    compiled = [logitgate.compile(logitgate.Grammar.from_regex(p), tok) for p in patterns]
    prompt = torch.tensor([[ord(c) for c in "Say: "]] * 2, device="cuda")
    for sample in (False, True):
        proc = LogitgateLogitsProcessor(compiled)
        out = model.generate(prompt, attention_mask=torch.ones_like(prompt), logits_processor=[proc],
                             max_new_tokens=12, do_sample=sample, pad_token_id=256, eos_token_id=256)
        for row, pattern in zip(out[:, prompt.shape[1]:].tolist(), patterns):
            text = bytes(t for t in row if t < 256).decode()
            assert row[len(text)] == 256 and re.fullmatch(pattern, text), (pattern, row)
