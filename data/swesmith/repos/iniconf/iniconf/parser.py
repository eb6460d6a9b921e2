"""INI parsing and value access."""
import re

_SECTION = re.compile(r"\[\s*([^\]]+?)\s*\]\s*$")
_OPTION = re.compile(r"([^=:\s][^=:]*?)\s*[=:]\s*(.*)$")
_REF = re.compile(r"\$\{([^}]*)\}")
_TRUE = {"1", "yes", "true", "on"}
_FALSE = {"0", "no", "false", "off"}
MAX_DEPTH = 10


class ParseError(ValueError):
    """Syntax error in the INI text, or a bad reference."""

    def __init__(self, message, lineno=None):
        super().__init__(f"line {lineno}: {message}" if lineno else message)
        self.lineno = lineno


def _strip_inline_comment(value):
    """Remove a trailing ' ;...' or ' #...' comment that is outside double quotes."""
    in_quotes = False
    for i, ch in enumerate(value):
        if ch == '"':
            in_quotes = not in_quotes
        elif ch in ";#" and not in_quotes and (i == 0 or value[i - 1].isspace()):
            return value[:i].rstrip()
    return value


def _unquote(value):
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1].replace('\\"', '"')
    return value


class Config:
    """Parsed configuration: sections of (lower-cased) options."""

    def __init__(self):
        self._sections = {}

    def sections(self):
        return list(self._sections)

    def options(self, section):
        return list(self._section(section))

    def has_option(self, section, option):
        return section in self._sections and option.lower() in self._sections[section]

    def _section(self, section):
        try:
            return self._sections[section]
        except KeyError:
            raise KeyError(f"no section {section!r}") from None

    def raw(self, section, option):
        opts = self._section(section)
        try:
            return opts[option.lower()]
        except KeyError:
            raise KeyError(f"no option {option!r} in section {section!r}") from None

    def get(self, section, option, default=KeyError):
        try:
            value = self.raw(section, option)
        except KeyError:
            if default is KeyError:
                raise
            return default
        return self._interpolate(section, value, 0)

    def _interpolate(self, section, value, depth):
        if depth > MAX_DEPTH:
            raise ParseError(f"interpolation too deep in section {section!r}")

        def repl(m):
            ref = m.group(1)
            if ":" in ref:
                sec, opt = ref.split(":", 1)
            else:
                sec, opt = section, ref
            try:
                raw = self.raw(sec, opt)
            except KeyError:
                raise ParseError(f"bad reference ${{{ref}}}") from None
            return self._interpolate(sec, raw, depth + 1)

        return _REF.sub(repl, value)

    def getint(self, section, option, default=KeyError):
        value = self.get(section, option, default)
        return value if value is default else int(value)

    def getfloat(self, section, option, default=KeyError):
        value = self.get(section, option, default)
        return value if value is default else float(value)

    def getbool(self, section, option, default=KeyError):
        value = self.get(section, option, default)
        if value is default:
            return value
        v = value.strip().lower()
        if v in _TRUE:
            return True
        if v in _FALSE:
            return False
        raise ValueError(f"not a boolean: {value!r}")

    def getlist(self, section, option, default=KeyError):
        """Items separated by newlines (continuation lines) or commas; blanks dropped."""
        value = self.get(section, option, default)
        if value is default:
            return value
        items = []
        for line in value.splitlines():
            items.extend(x.strip() for x in line.split(","))
        return [x for x in items if x]


def loads(text):
    """Parse INI text into a Config."""
    cfg = Config()
    section = None
    last = None  # (section, option) that a continuation line extends
    for lineno, raw in enumerate(text.splitlines(), 1):
        if not raw.strip() or raw.lstrip()[0] in ";#":
            continue
        if raw[0].isspace() and last is not None:
            sec, opt = last
            cont = _strip_inline_comment(raw.strip())
            cfg._sections[sec][opt] += "\n" + cont
            continue
        line = raw.strip()
        m = _SECTION.match(line)
        if m:
            section = m.group(1)
            if section in cfg._sections:
                raise ParseError(f"duplicate section {section!r}", lineno)
            cfg._sections[section] = {}
            last = None
            continue
        m = _OPTION.match(line)
        if not m:
            raise ParseError(f"cannot parse {line!r}", lineno)
        if section is None:
            raise ParseError("option outside of any section", lineno)
        key = m.group(1).strip().lower()
        if key in cfg._sections[section]:
            raise ParseError(f"duplicate option {key!r} in section {section!r}", lineno)
        value = _unquote(_strip_inline_comment(m.group(2).strip()))
        cfg._sections[section][key] = value
        last = (section, key)
    for sec, opts in cfg._sections.items():
        for opt, value in opts.items():
            opts[opt] = value.strip("\n") if value.startswith("\n") else value
    return cfg


def load(path, encoding="utf-8"):
    with open(path, encoding=encoding) as f:
        return loads(f.read())
