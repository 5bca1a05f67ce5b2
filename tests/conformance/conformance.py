"""Shared pieces of the conformance suite: the Unsupported outcome, seeding, and
torch.testing.assert_close with vLLM's tolerances."""

import random


class Unsupported(Exception):
    """A case whose feature is outside attnjit (the reason names it)."""


def seed_everything(torch, seed):
    random.seed(seed)
    torch.manual_seed(seed)


def assert_close(torch, actual, expected, atol=None, rtol=None, what=""):
    kwargs = {} if atol is None else dict(atol=atol, rtol=rtol)
    torch.testing.assert_close(actual, expected, msg=lambda m: "%s: %s" % (what, m) if what else m, **kwargs)
