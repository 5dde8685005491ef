"""Model integrations: the generation loop and adapters for transformers, llama.cpp and vLLM.

Each adapter imports its library lazily, so ``import logitgate`` never needs them.
"""
