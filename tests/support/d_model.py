"""A model of the DTrace clauses tumbler's illumos scripts use, to run them
on a trace of kernel events: no dtrace runs here.

It knows exactly the D the scripts are written in -- top-level
declarations (``int a[int];``, ``self int x;``, ``inline int N = 6;``),
clauses ``probe[, probe...] [/predicate/] { statements }``, assignments to
thread-locals (``self->x``), global scalars and associative arrays,
aggregations ``@a[keys] = sum(expr)`` / ``count()``, the operators of C
with ``?:``, and the built-ins ``pid``, ``tid``, ``cpu``, ``timestamp``,
``arg0``, ``args[N]->field``, ``curthread->field``, ``$target`` and
``$1`` -- and D's rule for dynamic variables: reading one never assigned
gives 0, and assigning 0 frees it (``dynamic`` counts what is held, the
space a script leaks if it never frees).  Anything else is an error,
so a script that strays outside the model fails its tests instead of being
half understood.  ``printf``, ``printa`` and ``trunc`` are accepted and
ignored: only the clauses of BEGIN, END and the profile ticks call them,
and traces never fire those.

An event is a dict: ``probe`` ("sched:::sleep"), the context it fires in
(``pid``, ``tid``, ``cpu``: the thread on the CPU, as D's built-ins see
it), ``timestamp``, and as the probe has them ``arg0``, ``args`` (a list
of dicts: ``args[0]->pr_lwpid`` is ``args[0]["pr_lwpid"]``) and
``curthread`` (a dict of kthread_t fields).
"""

import re

_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)
_TOKEN = re.compile(r"\s*(?:(?P<num>\d+)|(?P<str>\"(?:[^\"\\]|\\.)*\")|(?P<macro>\$\w+)|(?P<agg>@\w+)|(?P<name>[A-Za-z_]\w*)"
                    r"|(?P<op>->|\+\+|--|\+=|-=|==|!=|<=|>=|&&|\|\||[-+*/%<>!?:=\[\](),;]))")
_BUILTINS = ("pid", "tid", "cpu", "timestamp", "arg0")
_IGNORED_CALLS = ("printf", "printa", "trunc")
# binary operators, loosest first
_LEVELS = (("||",), ("&&",), ("==", "!="), ("<", ">", "<=", ">="), ("+", "-"), ("*", "/", "%"))


class DError(Exception):
    """The script uses D this model does not know."""


def _tokens(text):
    out, i = [], 0
    text = text.rstrip()
    while i < len(text):
        m = _TOKEN.match(text, i)
        if not m or m.end() == i:
            raise DError("cannot read %r" % text[i:i + 20])
        kind = m.lastgroup
        out.append((kind, m.group(kind)))
        i = m.end()
    return out


class _Parser:
    """Expressions to ('kind', ...) trees, one statement list or predicate."""

    def __init__(self, text):
        self.toks = _tokens(text)
        self.i = 0

    def peek(self, value=None):
        if self.i >= len(self.toks):
            return None
        tok = self.toks[self.i]
        return tok if value is None or tok[1] == value else None

    def take(self, value=None):
        tok = self.peek()
        if tok is None or (value is not None and tok[1] != value):
            raise DError("expected %r at %r" % (value, tok))
        self.i += 1
        return tok

    def statements(self):
        out = []
        while self.peek() is not None:
            if self.peek(";"):
                self.take()
                continue
            out.append(self.statement())
        return out

    def statement(self):
        tok = self.peek()
        if tok[0] == "agg":
            name = self.take()[1]
            self.take("[")
            keys = self.arguments("]")
            self.take("=")
            func = self.take()[1]
            self.take("(")
            args = self.arguments(")")
            if func not in ("sum", "count"):
                raise DError("aggregating function %s" % func)
            return ("aggregate", name, keys, func, args)
        if tok[0] == "name" and tok[1] in _IGNORED_CALLS:
            self.take()
            self.take("(")
            self.arguments(")")
            return ("nothing",)
        target = self.expression()
        op = self.peek()
        if op is not None and op[1] in ("=", "+=", "-="):
            self.take()
            return ("assign", target, op[1], self.expression())
        return ("evaluate", target)

    def arguments(self, close):
        args = []
        while not self.peek(close):
            args.append(self.expression())
            if not self.peek(close):
                self.take(",")
        self.take(close)
        return args

    def expression(self):
        condition = self.binary(0)
        if self.peek("?"):
            self.take()
            then = self.expression()
            self.take(":")
            return ("if", condition, then, self.expression())
        return condition

    def binary(self, level):
        if level == len(_LEVELS):
            return self.unary()
        left = self.binary(level + 1)
        while self.peek() is not None and self.peek()[1] in _LEVELS[level]:
            op = self.take()[1]
            left = ("binary", op, left, self.binary(level + 1))
        return left

    def unary(self):
        tok = self.peek()
        if tok is not None and tok[1] in ("!", "-"):
            self.take()
            return ("unary", tok[1], self.unary())
        if tok is not None and tok[1] in ("++", "--"):
            self.take()
            return ("increment", tok[1], self.unary())
        return self.postfix()

    def postfix(self):
        node = self.primary()
        while True:
            if self.peek("["):
                self.take()
                keys = self.arguments("]")
                node = ("index", node, keys)
            elif self.peek("->"):
                self.take()
                node = ("member", node, self.take()[1])
            else:
                return node

    def primary(self):
        kind, value = self.take()
        if kind == "num":
            return ("number", int(value))
        if kind == "macro":
            return ("macro", value)
        if kind in ("str", "agg"):       # arguments of printf and printa
            return ("text", value)
        if kind == "name":
            return ("name", value)
        if value == "(":
            node = self.expression()
            self.take(")")
            return node
        raise DError("unexpected %r" % value)


def split_script(text):
    """(top-level declarations, [(clause head, body)] in program order, text
    left after the last clause) of a D script, without its comments and
    ``#pragma`` lines; a head is ``probe-spec [/predicate/]``."""
    text = "\n".join(line for line in _COMMENT.sub(" ", text).splitlines()
                     if not line.lstrip().startswith("#"))
    declarations, clauses = [], []
    i, start = 0, 0
    while i < len(text):
        if text[i] == ";":
            if text[start:i].strip():
                declarations.append(text[start:i].strip())
            start = i + 1
        elif text[i] == "{":
            depth, j = 1, i + 1
            while depth:
                depth += {"{": 1, "}": -1}.get(text[j], 0)
                j += 1
            clauses.append((text[start:i], text[i + 1:j - 1]))
            start = i = j
            continue
        i += 1
    return declarations, clauses, text[start:].strip()


class Program:
    """A D script, parsed; ``run(events)`` fires its clauses."""

    def __init__(self, text, target, period_ms=100):
        self.target, self.period_ms = target, period_ms
        self.constants, self.arrays = {}, set()
        self.clauses = []                  # (probe names, predicate or None, statements)
        self.scalars = {}                  # global scalars (0: unset)
        self.assoc = {}                    # array name -> {key tuple: value}
        self.thread = {}                   # (pid, tid) -> {name: value}
        self.aggregations = {}             # @name -> {key tuple: value}
        self._parse(text)

    # -- the script ----------------------------------------------------------

    def _parse(self, text):
        declarations, clauses, rest = split_script(text)
        if rest:
            raise DError("trailing text %r" % rest[:40])
        for declaration in declarations:
            self._declare(declaration)
        for head, body in clauses:
            self._clause(head, body)

    def _declare(self, text):
        if not text:
            return
        m = re.match(r"inline\s+\w+\s+(\w+)\s*=\s*(\d+)\Z", text)
        if m:
            self.constants[m.group(1)] = int(m.group(2))
            return
        m = re.match(r"(self\s+)?[\w\s*]*?\b(\w+)\s*(\[[^\]]*\])?\Z", text)
        if not m:
            raise DError("declaration %r" % text)
        if m.group(3) and not m.group(1):
            self.arrays.add(m.group(2))

    def _clause(self, head, body):
        head = head.strip()
        predicate = None
        if "/" in head:
            first, last = head.index("/"), head.rindex("/")
            predicate = _Parser(head[first + 1:last]).expression()
            head = head[:first]
        probes = tuple(p.strip() for p in head.split(",") if p.strip())
        self.clauses.append((probes, predicate, _Parser(body).statements()))

    # -- running -------------------------------------------------------------

    def run(self, events):
        for event in events:
            for probes, predicate, statements in self.clauses:
                if event["probe"] not in probes:
                    continue
                if predicate is not None and not self._value(predicate, event):
                    continue
                for statement in statements:
                    self._execute(statement, event)
        return self

    def aggregation(self, name):
        return dict(self.aggregations.get(name, {}))

    def dynamic(self):
        """Dynamic variables held: thread-locals and associative array
        entries that were assigned and never freed (set to 0)."""
        return (sum(len(v) for v in self.thread.values())
                + sum(len(v) for v in self.assoc.values()))

    def _execute(self, statement, event):
        kind = statement[0]
        if kind == "nothing":
            return
        if kind == "evaluate":
            self._value(statement[1], event)
            return
        if kind == "aggregate":
            _, name, keys, func, args = statement
            key = tuple(self._value(k, event) for k in keys)
            add = 1 if func == "count" else self._value(args[0], event)
            table = self.aggregations.setdefault(name, {})
            table[key] = table.get(key, 0) + add
            return
        _, target, op, expression = statement
        value = self._value(expression, event)
        if op != "=":
            old = self._value(target, event)
            value = old + value if op == "+=" else old - value
        self._store(target, value, event)

    def _store(self, target, value, event):
        store, key = self._slot(target, event)
        if value == 0:
            store.pop(key, None)        # D frees a dynamic variable assigned 0
        else:
            store[key] = value

    def _slot(self, node, event):
        """(dict, key) that holds the lvalue ``node``."""
        if node[0] == "member" and node[1] == ("name", "self"):
            return self.thread.setdefault((event["pid"], event["tid"]), {}), node[2]
        if node[0] == "index" and node[1][0] == "name":
            name = node[1][1]
            if name not in self.arrays:
                self.arrays.add(name)   # D: an array is declared by its first use
            key = tuple(self._value(k, event) for k in node[2])
            return self.assoc.setdefault(name, {}), key
        if node[0] == "name" and node[1] not in _BUILTINS:
            return self.scalars, node[1]
        raise DError("cannot assign to %r" % (node,))

    def _value(self, node, event):
        kind = node[0]
        if kind == "number":
            return node[1]
        if kind == "macro":
            if node[1] == "$target":
                return self.target
            if node[1] == "$1":
                return self.period_ms
            raise DError("macro %s" % node[1])
        if kind == "name":
            name = node[1]
            if name in _BUILTINS:
                return event[name]
            if name in self.constants:
                return self.constants[name]
            return self.scalars.get(name, 0)
        if kind == "member":
            base = node[1]
            if base == ("name", "self"):
                return self.thread.get((event["pid"], event["tid"]), {}).get(node[2], 0)
            if base == ("name", "curthread"):
                return event["curthread"][node[2]]
            if base[0] == "index" and base[1] == ("name", "args"):
                return event["args"][self._value(base[2][0], event)][node[2]]
            raise DError("member of %r" % (base,))
        if kind == "index":
            store, key = self._slot(node, event)
            return store.get(key, 0)
        if kind == "if":
            branch = node[2] if self._value(node[1], event) else node[3]
            return self._value(branch, event)
        if kind == "unary":
            value = self._value(node[2], event)
            return int(not value) if node[1] == "!" else -value
        if kind == "increment":
            value = self._value(node[2], event) + (1 if node[1] == "++" else -1)
            self._store(node[2], value, event)
            return value
        if kind == "binary":
            return _binary(node[1], self._value(node[2], event), lambda: self._value(node[3], event))
        raise DError("expression %r" % (node,))


_COMPARE = {"==": lambda a, b: a == b, "!=": lambda a, b: a != b, "<": lambda a, b: a < b,
            ">": lambda a, b: a > b, "<=": lambda a, b: a <= b, ">=": lambda a, b: a >= b}
_ARITHMETIC = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
               "/": lambda a, b: int(a / b),                 # C: towards zero
               "%": lambda a, b: a - b * int(a / b)}


def _binary(op, left, right):
    """``right`` is a thunk: && and || do not evaluate it when ``left`` decides."""
    if op == "&&":
        return int(bool(left) and bool(right()))
    if op == "||":
        return int(bool(left) or bool(right()))
    if op in _COMPARE:
        return int(_COMPARE[op](left, right()))
    return _ARITHMETIC[op](left, right())
