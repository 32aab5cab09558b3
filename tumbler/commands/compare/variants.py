"""The policies ``compare --policies`` names: compare's own (``default``,
``pinned``, ``psets``), tumbler's, and variants of tumbler's that carry
tumbler options (``auto+capacity=cpus``), checked before any run."""

from ...config import CAPACITY_CHOICES, POLICY_CHOICES, SHARE_CHOICES, SHARE_POLICY_CHOICES
from ...errors import UsageError

#: Policies compare runs itself; every other name is a ``tumbler --policy``.
OWN_POLICIES = ("default", "pinned", "psets")
TUMBLER_POLICIES = tuple(p for p in POLICY_CHOICES if p not in OWN_POLICIES)
POLICY_NAMES = OWN_POLICIES + TUMBLER_POLICIES
DEFAULT_POLICIES = ("default", "pinned", "psets", "tumbler", "auto")

#: With --together, every round first runs each program by itself under this name.
ALONE = "alone"

#: Options a tumbler-run policy may carry as a variant (``auto+capacity=cpus``):
#: key -> the values tumbler's option of the same name takes.
VARIANT_OPTIONS = {"capacity": CAPACITY_CHOICES, "share": SHARE_CHOICES,
                   "share-policy": SHARE_POLICY_CHOICES}

def parse_policies(text):
    """The policies of ``--policies``, in order, each checked (variants
    included, see split_variant); a bad list is a UsageError (one line)."""
    names = [name.strip() for name in text.split(",")]
    if not all(names):
        raise UsageError("--policies: empty policy name in %r" % text)
    seen = {}
    for name in names:
        base, options = split_variant(name)
        key = (base, frozenset(options))
        if key in seen:
            if seen[key] == name:
                raise UsageError("--policies: a policy is named twice in %r" % text)
            raise UsageError("--policies: %r and %r are the same policy" % (seen[key], name))
        seen[key] = name
    return names


def split_variant(name):
    """(base policy, [(key, value), ...]) of a policy name: ``auto`` is
    ("auto", []), ``auto+share=space+capacity=cpus`` is ("auto",
    [("share", "space"), ("capacity", "cpus")]).  A UsageError if the name
    is not a policy, or a variant's options are not what tumbler takes."""
    base, *parts = name.split("+")
    if base == ALONE:
        raise UsageError("--policies: %r is not a policy to name: with --together compare "
                         "runs each program alone itself" % name)
    if base not in POLICY_NAMES:
        raise UsageError("--policies: unknown policy %r (choose from %s)"
                         % (base if parts else name, ", ".join(POLICY_NAMES)))
    if parts and base in OWN_POLICIES:
        raise UsageError("--policies: %r: only the tumbler-run policies (%s) take variant "
                         "options" % (name, ", ".join(TUMBLER_POLICIES)))
    options = []
    for part in parts:
        key, equals, value = part.partition("=")
        if not equals:
            raise UsageError("--policies: %r: %r is not KEY=VALUE (keys: %s)"
                             % (name, part, ", ".join(VARIANT_OPTIONS)))
        if key not in VARIANT_OPTIONS:
            raise UsageError("--policies: %r: unknown variant option %r (choose from %s)"
                             % (name, key, ", ".join(VARIANT_OPTIONS)))
        if value not in VARIANT_OPTIONS[key]:
            raise UsageError("--policies: %r: %s must be %s, not %r"
                             % (name, key, " or ".join(VARIANT_OPTIONS[key]), value))
        if any(key == k for k, _ in options):
            raise UsageError("--policies: %r: %s is given twice" % (name, key))
        options.append((key, value))
    return base, options


def variant_flags(name):
    """The tumbler options of a policy variant: ``--KEY VALUE`` for each."""
    return [arg for key, value in split_variant(name)[1] for arg in ("--" + key, value)]


def base_policy(name):
    """The policy a variant is of (``auto`` for ``auto+capacity=cpus``)."""
    return name.split("+", 1)[0]
