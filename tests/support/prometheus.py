"""The Prometheus text format (0.0.4) of the service's metrics file, parsed
back and checked."""

import re


def parse_text_format(text):
    """{(name, frozenset of labels): value}, checking the 0.0.4 text format:
    HELP and TYPE before each family, names and labels as the format says."""
    samples, typed = {}, set()
    label = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\\n]|\\[\\"n])*)"')
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name, kind = line.split()[2:4]
            assert kind in ("counter", "gauge")
            typed.add(name)
            continue
        if line.startswith("#"):
            assert line.startswith("# HELP ")
            continue
        match = re.fullmatch(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(\{.*\})? (\S+)", line)
        assert match, line
        name, labels, value = match.groups()
        assert name in typed, name
        pairs = frozenset(label.findall(labels[1:-1])) if labels else frozenset()
        if labels:
            assert ",".join('%s="%s"' % p for p in label.findall(labels[1:-1])) == labels[1:-1]
        samples[(name, pairs)] = float(value)
    return samples
