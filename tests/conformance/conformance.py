"""Shared pieces of the conformance suite: the Unsupported outcome, seeding, and
torch.testing.assert_close with vLLM's tolerances."""

import random


class Unsupported(Exception):
    """A case whose feature is outside attnjit (the reason names it)."""


def seed_everything(torch, seed):
    random.seed(seed)
    torch.manual_seed(seed)


def split_options(split, kv_lens):
    """vLLM's seq_threshold_3D as attnjit options: 0 (split False) keeps every
    batch in one launch; a positive one lets small batches split their keys,
    which attnjit does when it knows the longest sequence (max_seq_len)."""
    return dict(max_seq_len=max(kv_lens)) if split else dict(runtime_scratch=False)


def assert_close(torch, actual, expected, atol=None, rtol=None, what=""):
    kwargs = {} if atol is None else dict(atol=atol, rtol=rtol)
    torch.testing.assert_close(actual, expected, msg=lambda m: "%s: %s" % (what, m) if what else m, **kwargs)
