"""A launch script's argument line, expanded as bash would build it, without running it.

Megatron-LM's own example scripts (``examples/*/train_*.sh``) build the training command from bash
arrays and variables (``MODEL_ARGS=( --num-layers 32 ... )``, ``${MODEL_ARGS[@]}``,
``${MASTER_PORT:-29500}``) and ``if`` blocks that add options (``if [[ "$DTYPE" == "fp8" ]]; then
DTYPE_ARGS+=( ... ); fi``).  :func:`launch_words` evaluates that subset: assignments (``export``,
``declare``/``local`` included) of scalars and arrays, ``+=``, ``$NAME`` / ``${NAME}`` /
``${NAME:-default}`` / ``${NAME[@]}`` expansions with bash's quoting and word splitting, and
``if`` / ``elif`` / ``else`` on ``[ ]`` / ``[[ ]]`` tests of strings (``=``, ``==``, ``!=``,
``-n``, ``-z``, ``!``, joined by ``||`` / ``&&``).  The script runs with no environment: a
variable it does not set is empty, so each ``${NAME:-default}`` takes its default, as on a fresh
shell.  Nothing is executed: a command substitution ``$(...)`` or arithmetic ``$((...))`` stays an
opaque word, and a test it cannot decide (a file test, a number compared) or a loop is refused
only where the block sets a variable; otherwise it cannot change the line and is skipped.  The
launch line is the last command with a ``.py`` word (the training script) or running ``python -m``
a module (MaxText's trainer).  The Transformer Engine and NCCL variables the script sets (exported,
or before the launch command) are said, or refused where they turn off the fused attention the line
would be priced with (:func:`environment_notes`)."""

from __future__ import annotations

import re

__all__ = ["launch_words", "is_bash_script", "environment_notes"]

_NAME = re.compile(r"[A-Za-z_][A-Za-z_0-9]*")
_ASSIGN = re.compile(r"^(?:(?:export|declare|local|readonly|typeset)(?:\s+-[a-zA-Z]+)*\s+)?([A-Za-z_][A-Za-z_0-9]*)(\+?=)")
_UNSUPPORTED_BLOCKS = ("for", "while", "until", "case", "select", "function")


def is_bash_script(text: str) -> bool:
    """Whether ``text`` builds its command from bash arrays or ``if`` blocks (so the plain word
    split of an argument file would misread it)."""
    return bool(re.search(r"\[@\]|\[\*\]|^\s*(?:export\s+)?[A-Za-z_]\w*\+?=\(", text, re.M)
                or re.search(r"^\s*if\s", text, re.M))


def _without_heredocs(text: str) -> str:
    """``text`` without the bodies of its here-documents (``cmd <<EOF`` ... ``EOF``): data for
    the command (an ``sbatch`` job script, say), not statements of this script."""
    out, lines, i = [], text.split("\n"), 0
    while i < len(lines):
        out.append(lines[i])
        m = re.search(r"<<(-?)\s*['\"]?([A-Za-z_]\w*)['\"]?", lines[i])
        i += 1
        if m:
            while i < len(lines) and (lines[i].lstrip("\t") if m.group(1) else lines[i]) != m.group(2):
                i += 1
            i += 1
    return "\n".join(out)


def _logical_lines(text: str) -> list[str]:
    """Statements: here-documents dropped, continuations joined, comments dropped, ``;`` and
    newlines outside quotes and outside an array's parentheses split."""
    text = _without_heredocs(text).replace("\\\n", " ")
    out, cur, quote, depth, i = [], [], None, 0, 0
    while i < len(text):
        c = text[i]
        if quote:
            cur.append(c)
            if c == "\\" and quote == '"' and i + 1 < len(text):
                cur.append(text[i + 1])
                i += 1
            elif c == quote:
                quote = None
        elif c in "'\"":
            quote = c
            cur.append(c)
        elif c == "#" and (not cur or cur[-1] in " \t\n;(") and not (cur and cur[-1] == "$"):
            while i < len(text) and text[i] != "\n":
                i += 1
            continue
        elif c == "$" and text.startswith("$((", i):
            end = text.find("))", i)
            end = len(text) - 2 if end < 0 else end
            cur.append(text[i:end + 2])
            i = end + 2
            continue
        elif c == "(" and cur and cur[-1] == "=":
            depth += 1
            cur.append(c)
        elif c == ")" and depth:
            depth -= 1
            cur.append(c)
        elif c in "\n;" and not depth:
            if c == ";" and text.startswith(";;", i):
                cur.append(";;")
                i += 2
                continue
            out.append("".join(cur).strip())
            cur = []
        else:
            cur.append(" " if c == "\n" else c)
        i += 1
    out.append("".join(cur).strip())
    return [s for s in out if s]


class _Shell:
    """The script's variables (scalars and arrays) and bash's expansion of words against them."""

    def __init__(self, who: str):
        self.who = who
        self.scalars: dict[str, str] = {}
        self.arrays: dict[str, list[str]] = {}

    # ------------------------------------------------------------------ expansion
    def _value(self, name: str) -> list[str]:
        if name in self.arrays:
            return list(self.arrays[name])
        return [self.scalars[name]] if name in self.scalars else []

    def _plain(self, name: str) -> list[str]:
        """``$name`` outside a default: an unset positional parameter is the user's argument,
        kept as a placeholder word (``<$1>``) so a flag keeps its value."""
        v = self._value(name)
        if not v and name.isdigit():
            return [f"<${name}>"]
        return v

    def _param(self, body: str) -> tuple[list[str], bool]:
        """``${body}``: (its words, whether it is an array's every element)."""
        m = re.fullmatch(r"([A-Za-z_]\w*|\d+|@|\*)\[(@|\*)\]", body)
        if m:
            return self.arrays.get(m.group(1), self._value(m.group(1))), m.group(2) == "@"
        m = re.fullmatch(r"([A-Za-z_]\w*|\d+)(:?[-=])(.*)", body, re.S)
        if m:
            cur = self._value(m.group(1))
            unset = not cur or (m.group(2).startswith(":") and cur == [""])
            if unset:
                words = self.words(m.group(3), split=False)
                value = " ".join(words) if words else ""
                if m.group(2).endswith("=") and not m.group(1).isdigit():
                    self.scalars[m.group(1)] = value          # ${X:=d} assigns its default too
                return [value], False
            return [cur[0]], False
        m = re.fullmatch(r"([A-Za-z_]\w*|\d+)(?:\[0\])?", body)
        if m:
            v = self._plain(m.group(1))
            return [v[0] if v else ""], False
        return [f"${{{body}}}"], False            # a form not evaluated: kept as written

    def words(self, s: str, split: bool = True) -> list[str]:
        """The words of ``s`` as bash expands them (quotes removed; unquoted expansions split on
        whitespace; ``"${A[@]}"`` one word an element)."""
        words: list[list[str]] = []       # the words so far, each a list of parts
        cur: list[str] | None = None
        i, n = 0, len(s)

        def add(text: str) -> None:
            nonlocal cur
            if cur is None:
                cur = []
            cur.append(text)

        def end() -> None:
            nonlocal cur
            if cur is not None:
                words.append(cur)
            cur = None

        def expansion(j: int, quoted: bool) -> int:
            """Expand the ``$`` at ``j``; return the index after it."""
            nonlocal cur
            if s.startswith("$((", j):
                k = s.find("))", j)
                k = n - 2 if k < 0 else k
                add(self.arithmetic(s[j + 3:k]) or s[j:k + 2])
                return k + 2
            if s.startswith("$(", j) or s.startswith("`", j):
                close = "`" if s[j] == "`" else ")"
                depth, k = 0, j + 1
                while k < n:
                    if s[k] == "(" and close == ")":
                        depth += 1
                    elif s[k] == close:
                        if close == "`":
                            break
                        depth -= 1
                        if depth == 0:
                            break
                    k += 1
                add(s[j:k + 1])                # a command or arithmetic: an opaque word
                return k + 1
            if j + 1 < n and s[j + 1] == "{":
                k = next((i for i, c, depth in _unquoted(s[j:], "{", "}") if c == "}" and depth == 1), -1)
                if k < 0:
                    raise ValueError(f"{self.who}: an unclosed ${{ in {s!r}")
                k += j
                vals, each = self._param(s[j + 2:k])
                k += 1
            else:
                m = _NAME.match(s, j + 1) or re.compile(r"\d|@|\*|#|\?").match(s, j + 1)
                if not m:
                    add("$")
                    return j + 1
                name = m.group(0)
                vals, each, k = (self._plain(name)[:1] if name not in "@*#?" else []), False, m.end()
            if quoted:
                if each and len(vals) != 1:
                    # "${A[@]}": one word an element (none for an empty array)
                    for idx, v in enumerate(vals):
                        add(v)
                        if idx < len(vals) - 1:
                            end()
                    if not vals and cur == []:
                        cur = None
                else:
                    add(" ".join(vals))
                return k
            text = " ".join(vals)
            if not split:
                add(text)
                return k
            parts = text.split()
            if text[:1].isspace():
                end()
            for idx, p in enumerate(parts):
                add(p)
                if idx < len(parts) - 1:
                    end()
            if text[-1:].isspace():
                end()
            return k

        while i < n:
            c = s[i]
            if c in " \t\n":
                end()
                i += 1
            elif c == "'":
                k = s.find("'", i + 1)
                k = n if k < 0 else k
                add(s[i + 1:k])
                i = k + 1
            elif c == '"':
                add("")
                i += 1
                while i < n and s[i] != '"':
                    if s[i] == "\\" and i + 1 < n and s[i + 1] in '"$`\\':
                        add(s[i + 1])
                        i += 2
                    elif s[i] == "$":
                        i = expansion(i, True)
                    else:
                        add(s[i])
                        i += 1
                i += 1
            elif c == "\\" and i + 1 < n:
                add(s[i + 1])
                i += 2
            elif c == "$" or c == "`":
                i = expansion(i, False)
            else:
                add(c)
                i += 1
        end()
        return ["".join(w) for w in words]

    def arithmetic(self, expr: str) -> str | None:
        """``$(( expr ))`` of integers, variables and ``+ - * / % ( )``, as a decimal; None where
        it is anything else (kept as written)."""
        import ast

        def value(m: re.Match) -> str:
            v = self._value(m.group(1) or m.group(2))
            return v[0] if v and v[0].strip().lstrip("-").isdigit() else "x"
        text = re.sub(r"\$\{?([A-Za-z_]\w*)\}?|\b([A-Za-z_]\w*)\b", value, expr)
        try:
            tree = ast.parse(text.strip(), mode="eval")
        except SyntaxError:
            return None
        ops = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
               ast.Div: lambda a, b: int(a / b), ast.Mod: lambda a, b: a - b * int(a / b)}

        def ev(node):
            if isinstance(node, ast.Constant) and isinstance(node.value, int) and not isinstance(node.value, bool):
                return node.value
            if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
                v = ev(node.operand)
                return -v if isinstance(node.op, ast.USub) else v
            if isinstance(node, ast.BinOp) and type(node.op) in ops:
                a, b = ev(node.left), ev(node.right)
                if isinstance(node.op, (ast.Div, ast.Mod)) and b == 0:
                    raise ZeroDivisionError
                return ops[type(node.op)](a, b)
            raise ValueError
        try:
            return str(ev(tree.body))
        except (ValueError, ZeroDivisionError, RecursionError):
            return None

    # ------------------------------------------------------------------ tests
    def test(self, cond: str) -> bool | None:
        """A ``[ ]`` / ``[[ ]]`` test list: True, False, or None where it is not decidable here."""
        cond = cond.strip()
        for op in ("||", "&&"):
            parts = _split_top(cond, op)
            if len(parts) > 1:
                vals = [self.test(p) for p in parts]
                if op == "||":
                    return True if True in vals else (None if None in vals else False)
                return False if False in vals else (None if None in vals else True)
        neg = False
        if cond.startswith("!"):
            neg, cond = True, cond[1:].strip()
        m = re.fullmatch(r"\[\[(.*)\]\]|\[(.*)\]", cond, re.S)
        if not m:
            return None
        inner = m.group(1) if m.group(1) is not None else m.group(2)
        toks = self.words(inner, split=False)
        if toks and toks[0] == "!":
            neg, toks = not neg, toks[1:]
        res: bool | None
        if len(toks) == 2 and toks[0] in ("-n", "-z"):
            res = (toks[1] != "") == (toks[0] == "-n")
        elif len(toks) == 1:
            res = toks[0] != ""
        elif len(toks) == 3 and toks[1] in ("=", "==", "!="):
            if "$(" in toks[0] + toks[2] or "`" in toks[0] + toks[2]:
                return None
            res = (toks[0] == toks[2]) == (toks[1] != "!=")
        else:
            return None
        return (not res) if neg else res

    # ------------------------------------------------------------------ statements
    def assign(self, m: re.Match) -> None:
        """Apply the assignment ``m`` (:func:`_assignment`) matched."""
        name, op = m.group(1), m.group(2)
        rest = m.string[m.end():]
        if rest.startswith("("):
            close = _matching_paren(rest)
            vals = self.words(rest[1:close])
            if op == "+=":
                self.arrays[name] = self._value(name) + vals
            else:
                self.arrays[name] = vals
            self.scalars.pop(name, None)
        else:
            # in an assignment an array's elements join with spaces, whatever the quoting
            val = " ".join(self.words(_first_word(rest)[0], split=False))
            if name in self.arrays:
                self.arrays[name] = ([self.arrays[name][0] + val] + self.arrays[name][1:]) if op == "+=" \
                    and self.arrays[name] else [val]
            else:
                self.scalars[name] = self.scalars.get(name, "") + val if op == "+=" else val


def _assignment(stmt: str) -> re.Match | None:
    """``stmt``'s assignment match where it is one (``NAME=value``, ``NAME+=( ... )``), None where
    it is not, or is a command run with ``NAME=value`` in its environment."""
    m = _ASSIGN.match(stmt)
    if m is None:
        return None
    rest = stmt[m.end():]
    return m if rest.startswith("(") or not _first_word(rest)[1].strip() else None


def _names_script(words: list[str]) -> bool:
    """Whether ``words`` name a Python training script (a ``.py`` word)."""
    return any(w.endswith(".py") for w in words)


def _unquoted(s: str, opens: str, closes: str):
    """``(index, char, depth)`` of each character of ``s`` outside quotes, ``depth`` the
    ``opens`` minus ``closes`` before it (quote characters themselves not yielded)."""
    quote, depth = None, 0
    for i, c in enumerate(s):
        if quote:
            if c == quote:
                quote = None
            continue
        if c in "'\"":
            quote = c
            continue
        yield i, c, depth
        if c in opens:
            depth += 1
        elif c in closes:
            depth -= 1


def _first_word(s: str) -> tuple[str, str]:
    """``s``'s first shell word (quotes and ``${...}`` kept whole) and the rest."""
    for i, c, depth in _unquoted(s, "{(", "})"):
        if c in " \t" and depth <= 0:
            return s[:i], s[i:]
    return s, ""


def _split_top(s: str, op: str) -> list[str]:
    """``s`` split on ``op`` outside quotes and brackets."""
    parts, start = [], 0
    for i, _c, depth in _unquoted(s, "[", "]"):
        if depth == 0 and i >= start and s.startswith(op, i):
            parts.append(s[start:i])
            start = i + len(op)
    parts.append(s[start:])
    return [p.strip() for p in parts]


def _matching_paren(s: str) -> int:
    """The index of the parenthesis closing ``s``'s first (``len(s)`` where none does)."""
    for i, c, depth in _unquoted(s, "(", ")"):
        if c == ")" and depth == 1:
            return i
    return len(s)


def _runs_module(words: list[str]) -> bool:
    """Whether ``words`` run Python on a module (``python3 -m maxtext.trainers.pre_train.train``)."""
    return any(re.fullmatch(r"python[\d.]*", w.rsplit("/", 1)[-1]) and nxt == "-m"
               for w, nxt in zip(words, words[1:]))


def launch_words(text: str, who: str) -> tuple[list[str], list[str]]:
    """The words of the script's launch line (the last command naming a ``.py`` script), as
    bash builds them on a fresh shell, and notes of what was assumed (module docstring).
    Raises ``ValueError`` naming a construct that would change the line and is not evaluated."""
    sh = _Shell(who)
    notes: list[str] = []
    stack: list[list] = []      # per if-block: [taking this branch, a branch taken already, decidable]
    skip_depth = 0              # inside a loop, case or function body: assignments there are refused
    args_loop_depth: list[int] = []     # ... unless inside a loop over the script's arguments
    launch: list[str] | None = None
    launch_env: dict[str, str] = {}
    queue = _logical_lines(text)
    while queue:
        stmt = queue.pop(0)
        head = stmt.split(None, 1)[0] if stmt.split() else ""
        if head in ("then", "else", "do") and len(stmt.split(None, 1)) > 1:
            # a keyword and a statement on one line: the keyword, then the statement
            queue[:0] = [head, stmt.split(None, 1)[1]]
            continue
        active = all(b[0] for b in stack)
        if head in _UNSUPPORTED_BLOCKS or re.match(r"^[A-Za-z_]\w*\s*\(\)", stmt):
            skip_depth += 1
            if head in ("while", "until", "for") and re.search(r"\$#|\$@|\$\{@\}|\$\*", stmt) and skip_depth == 1:
                # a loop over the script's own arguments: none on a fresh run, so it never runs
                notes.append(f"`{stmt[:60]}` loops over the script's arguments: run without any, it never runs")
                args_loop_depth.append(skip_depth)
            continue
        if skip_depth:
            if head in ("done", "esac", "}"):
                if args_loop_depth and args_loop_depth[-1] == skip_depth:
                    args_loop_depth.pop()
                skip_depth -= 1
            elif _ASSIGN.match(stmt) and active and not args_loop_depth:
                raise ValueError(f"{who}: a loop, case or function sets {_ASSIGN.match(stmt).group(1)}; cosearch does "
                                 "not run shell control flow: give the expanded argument line")
            continue
        if head in ("if", "elif"):
            cond = stmt.split(None, 1)[1] if len(stmt.split(None, 1)) > 1 else ""
            if head == "if":
                value = sh.test(cond) if active else False
                stack.append([bool(value), bool(value), value is not None, cond])
            else:
                if not stack:
                    raise ValueError(f"{who}: elif without if")
                top = stack[-1]
                value = sh.test(cond) if not top[1] else False
                top[0] = bool(value) and not top[1]
                top[1] = top[1] or bool(value)
                top[2] = top[2] and (value is not None or top[1])
                top[3] = cond
            continue
        if head == "then":
            continue
        if head == "else":
            if not stack:
                raise ValueError(f"{who}: else without if")
            top = stack[-1]
            top[0] = not top[1]
            top[1] = True
            continue
        if head == "fi":
            if not stack:
                raise ValueError(f"{who}: fi without if")
            stack.pop()
            continue
        assignment = _assignment(stmt)
        if assignment:
            undecided = [b[3] for b in stack if not b[2]]
            if undecided:
                raise ValueError(f"{who}: `{undecided[-1]}` decides whether {assignment.group(1)} is set, "
                                 "and cosearch does not decide it (a file or number test): give the expanded argument "
                                 "line")
            if active:
                sh.assign(assignment)
                # a command kept in a string (TRAINING_CMD="... python pretrain_gpt.py ..."): its
                # last statement naming the script
                for part in re.split(r"[;\n]", sh.scalars.get(assignment.group(1), "")):
                    if _names_script(part.split()):
                        launch = part.split()
            continue
        if not active or any(not b[2] for b in stack):
            continue
        words = sh.words(stmt)
        prefix: dict[str, str] = {}
        while words and _ASSIGN.match(words[0]) and "=" in words[0]:
            name, _, value = words[0].partition("=")
            prefix[name] = value
            words = words[1:]               # NAME=value before a command: its environment
        if _names_script(words) or _runs_module(words):
            launch, launch_env = words, prefix
    if launch is None:
        raise ValueError(f"{who}: no launch line (a command naming a .py training script, or python -m a module) "
                         "in the script")
    notes.append("the launch script expanded as bash builds its line on a fresh shell (no environment: each "
                 "${NAME:-default} its default)")
    env = {n: v for n, v in sh.scalars.items() if n.startswith(("NVTE_", "NCCL_"))}
    env.update({n: v for n, v in launch_env.items() if n.startswith(("NVTE_", "NCCL_"))})
    notes += environment_notes(env, launch, who)
    return launch, notes


#: Transformer Engine and NCCL settings a launch script exports that change nothing cosearch prices
#: (the q.k layer scaling is numerics; the rest NCCL's InfiniBand transport and logging).
_NEUTRAL_ENV = re.compile(r"^(NVTE_APPLY_QK_LAYER_SCALING|NCCL_IB_\w+|NCCL_DEBUG\w*|NCCL_SOCKET_\w+|NCCL_NET_\w+|"
                          r"NCCL_ASYNC_ERROR_HANDLING|NCCL_P2P_NET_CHUNKSIZE|NCCL_AVOID_RECORD_STREAMS)$")


def environment_notes(env: dict[str, str], launch: list[str], who: str) -> list[str]:
    """What the Transformer Engine (``NVTE_*``) and NCCL (``NCCL_*``) variables a launch script sets
    change, said (none of it priced), as the library reads them: both of Transformer Engine's fused
    attention backends off (``NVTE_FLASH_ATTN=0`` and ``NVTE_FUSED_ATTN=0``: its unfused
    ``DotProductAttention``) is refused unless the line names its ``--attention-backend`` (which
    Megatron applies over them); ``NVTE_ALLOW_NONDETERMINISTIC_ALGO=0`` (the deterministic fused
    attention backward), ``NCCL_ALGO`` (NCCL's algorithm, e.g. NVLink SHARP off), the norms' SM
    margins and any other ``NVTE_`` / ``NCCL_`` setting are said, not priced."""
    notes = []
    backend = next((b for a, b in zip(launch, launch[1:]) if a == "--attention-backend"), None)
    backend = backend or next((w.split("=", 1)[1] for w in launch if w.startswith("--attention-backend=")), None)
    if env.get("NVTE_FLASH_ATTN") == "0" and env.get("NVTE_FUSED_ATTN") == "0" and backend in (None, "auto"):
        raise ValueError(f"{who}: NVTE_FLASH_ATTN=0 and NVTE_FUSED_ATTN=0 turn off both of Transformer Engine's fused "
                         "attention backends (its unfused attention runs); give --attention-backend unfused on the line "
                         "to price it so")
    for name, value in sorted(env.items()):
        if _NEUTRAL_ENV.match(name) or name in ("NVTE_FLASH_ATTN", "NVTE_FUSED_ATTN"):
            continue
        if name == "NVTE_ALLOW_NONDETERMINISTIC_ALGO":
            if value == "0":
                notes.append("NVTE_ALLOW_NONDETERMINISTIC_ALGO=0: Transformer Engine's deterministic fused attention "
                             "backward (slower), not priced")
        elif name == "NCCL_ALGO":
            notes.append(f"NCCL_ALGO={value}: NCCL's algorithm choice not priced (cosearch's collective rates)")
        elif name in ("NVTE_FWD_LAYERNORM_SM_MARGIN", "NVTE_BWD_LAYERNORM_SM_MARGIN"):
            notes.append(f"{name}={value}: SMs kept free of the norm kernels (for overlapped communication), "
                         "not priced")
        elif value != "":
            notes.append(f"{name}={value}: a Transformer Engine / NCCL setting cosearch does not read, not priced")
    return notes
