#!/usr/bin/env python3
"""The lock protocol's generator, run by the build (src/CMakeLists.txt; Python 3.7 or later).

  generate.py protocol PROTOCOL TEMPLATE OUTPUT
      lock/protocol.txt (its format is described at its top) into generated/lock/protocol.hpp,
      from lock/protocol.hpp.in: the names for the C++ of lock/, and the Lua prelude of constant
      tables that goes in front of every script (k_lua_prelude).
  generate.py scripts PROTOCOL TEMPLATE OUTPUT --common A.lua... --scripts A.lua... --light B.lua...
      the lock scripts into generated/lock/scripts.hpp, from lock/scripts.hpp.in: each script's
      source as EVAL runs it, with its SHA1, and the function library of all of them.
  generate.py luacheck PROTOCOL --config .luacheckrc --common ... --scripts ... --light ...
      luacheck on the function library as the build makes it, comments kept: every script in one
      text, so that a name used but defined nowhere, a local or a shared function nobody
      uses, and a script's local shadowing one of the shared code's are all seen; each message names
      the source file and line it comes from. (scripts/lint runs it: the target luacheck.)

A malformed line of PROTOCOL, or a script that does not fit, stops the build with
FILE:LINE: what is wrong. Each kind of line has its reader (Reader.read's table: a new kind is
one more method), and what the outputs say of it is a few lines in cpp_definitions and
lua_prelude.
The tests are tests/unit/generate_test.py (CTest: unit.generate).
"""

import argparse
import hashlib
import os
import re
import subprocess
import sys

# Names become C++ identifiers and Lua table keys: none may be a keyword of either.
RESERVED = frozenset("""
  and break do else elseif end false for function goto if in local nil not or repeat return then true until while
  auto bool case char class const default delete double enum explicit extern float friend inline int long namespace
  new operator private protected public register short signed sizeof static struct switch template this throw try
  typedef typename union unsigned using virtual void volatile""".split())

NAME = re.compile(r"[a-z][a-z0-9_]*")
# The kinds of Redis field line (KIND NAME FIELD): the namespace in C++, the table in Lua, and
# what the header says of them.
FIELD_KINDS = (
    ("info", "INFO", "The exclusive holder's hash, :info"),
    ("waiter", "WAITER", 'A waiter\'s fields in :w, "<id>.FIELD"'),
    ("holder", "HOLDER", 'A shared or semaphore holder\'s fields in :hi, "<id>.FIELD"'),
    ("sem", "SEM", "The semaphore's hash, :sem"),
    ("tick", "TICK", "The last tick run's hash, :tick (--once-per)"),
    ("summary", "SUM", "The lock's summary, :sum (a field ending in '.': a prefix, FIELD<event>)"),
    ("outcome", "OUTCOME", "How a hold ended, as its holder tells the release (the history's field outcome)"),
    ("event_field", "EV", "The fields of a history event (an entry of :log)"),
)
FIELD_KIND_NAMES = tuple(kind for kind, _, _ in FIELD_KINDS)
# Where a record (a record line) may be written: the hashes of the holders and waiters, and events.
RECORD_KINDS = ("info", "waiter", "holder", "event_field")


class Failure(Exception):
    """What is wrong, and where: PATH:LINE: MESSAGE (PATH: MESSAGE for the file as a whole)."""

    def __init__(self, path, line, message):
        super().__init__(f"{path}:{line}: {message}" if line else f"{path}: {message}")


class Reply:
    def __init__(self, name, code):
        self.name = name
        self.code = code  # as written (digits)
        self.fields = []
        self.rest = None  # the last field, when written FIELD...: the rest of the array


class Call:
    """A script's request: its arguments after the configuration (none for a light script), in
    order, each (name, what): what is "arg", "rest" (the rest of ARGV) or a record's name (its
    fields, in order); and the replies it answers with."""

    def __init__(self, name, light):
        self.name = name
        self.light = light
        self.args = []
        self.answers = None


class Protocol:
    """What protocol.txt defines, in the order of its lines."""

    def __init__(self):
        self.version = None
        self.config = []
        self.records = {}  # name: [field names]
        self.options = []  # (name, letter)
        self.calls = []
        self.header = []
        self.replies = []
        self.keys = []  # (part, lua, suffix)
        self.sides = []  # (name, suffix)
        self.events = []
        self.retired = {kind: [] for kind in FIELD_KIND_NAMES}  # kind: [(field, version)]
        self.fields = {kind: [] for kind in FIELD_KIND_NAMES}  # kind: [(name, field)]

    def call(self, name):
        return next(c for c in self.calls if c.name == name)

    def record_places(self, record):
        """The field kinds where a record is written: those that name every one of its fields."""
        return [kind for kind in RECORD_KINDS
                if all(any(name == field for name, _ in self.fields[kind]) for field in self.records[record])]


class Reader:
    """Reads protocol.txt into a Protocol, line by line: line_KIND(words) for a line of KIND."""

    def __init__(self, path):
        self.path = path
        self.line = 0
        self.protocol = Protocol()
        self.seen = {}  # what: the names defined so far

    def fail(self, message):
        raise Failure(self.path, self.line, message)

    def name(self, name):
        if not NAME.fullmatch(name):
            self.fail(f"'{name}' is not a name (a-z, 0-9 and _, a letter first)")
        if name in RESERVED:
            self.fail(f"'{name}' is a keyword of C++ or Lua, or a name the header reserves")
        return name

    def unique(self, what, name):
        names = self.seen.setdefault(what, set())
        if name in names:
            self.fail(f"{what} '{name}' is defined twice")
        names.add(name)
        return name

    def arity(self, words, count, usage):
        if len(words) != count:
            self.fail(usage)

    def read(self, text):
        # Each kind of line and what reads it.
        kinds = {"version": self.line_version, "config": self.line_config, "record": self.line_record,
                 "option": self.line_option, "call": self.call_line(False), "light": self.call_line(True),
                 "answers": self.line_answers, "retired": self.line_retired,
                 "header": self.line_header, "reply": self.line_reply, "key": self.line_key,
                 "side": self.line_side, "event": self.line_event}
        kinds.update({kind: self.field_line(kind) for kind in FIELD_KIND_NAMES})
        for self.line, line in enumerate(text.split("\n"), 1):
            words = line.split("#", 1)[0].split()
            if not words:
                continue
            kind = words.pop(0)
            if kind not in kinds:
                self.fail(f"unknown kind '{kind}' ({', '.join(kinds)})")
            kinds[kind](words)
        self.line = 0
        self.check()
        return self.protocol

    # ---- One method a kind of line.

    def line_version(self, words):
        self.arity(words, 1, "version N")
        if self.protocol.version is not None:
            self.fail("one version line")
        if not re.fullmatch(r"[1-9][0-9]*", words[0]):
            self.fail(f"version: '{words[0]}' is not a whole number above 0")
        self.protocol.version = int(words[0])

    def line_config(self, words):
        if self.protocol.config or not words:
            self.fail("one config line, with the names of the configuration's arguments")
        for name in words:
            self.protocol.config.append(self.unique("config argument", self.name(name)))

    def line_record(self, words):
        if len(words) < 2:
            self.fail("record NAME FIELD...")
        name, *fields = words
        self.unique("record", self.name(name))
        for field in fields:
            self.unique(f"record {name}: the field", self.name(field))
        self.protocol.records[name] = fields

    def line_option(self, words):
        self.arity(words, 2, "option NAME LETTER")
        name, letter = words
        self.unique("option", self.name(name))
        if not re.fullmatch(r"[a-z]", letter):
            self.fail(f"option {name}: '{letter}' is not a letter (a-z)")
        self.unique("option (its letter)", letter)
        self.protocol.options.append((name, letter))

    def call_line(self, light):
        """What reads a line call NAME ARG... (light NAME ARG...: a script without configuration)."""
        kind = "light" if light else "call"

        def read(words):
            if not words:
                self.fail(f"{kind} NAME [ARG...]")
            call = Call(self.unique("call", self.name(words[0])), light)
            for i, arg in enumerate(words[1:]):
                what = "arg"
                if arg.endswith("..."):
                    arg, what = arg[: -len("...")], "rest"
                    if i != len(words) - 2:
                        self.fail(f"{kind} {call.name}: only the last argument may be the rest (ARG...)")
                elif arg in self.protocol.records:
                    what = arg
                self.name(arg)
                if arg in ("args", "size", "answer"):
                    self.fail(f"{kind} {call.name}: '{arg}' is a name the header reserves")
                call.args.append((self.unique(f"{kind} {call.name}: the argument", arg), what))
            self.protocol.calls.append(call)

        return read

    def line_answers(self, words):
        if len(words) < 2:
            self.fail("answers CALL REPLY...")
        name, *replies = words
        calls = {c.name: c for c in self.protocol.calls}
        if name not in calls:
            self.fail(f"answers {name}: no call or light line names '{name}' before")
        if calls[name].answers is not None:
            self.fail(f"answers {name}: the call's answers are given twice")
        known = {r.name: r for r in self.protocol.replies}
        codes = {}
        for reply in replies:
            if reply not in known:
                self.fail(f"answers {name}: no reply line names '{reply}' before")
            code = known[reply].code
            if code in codes:
                self.fail(f"answers {name}: '{reply}' has the code of '{codes[code]}' ({code})")
            codes[code] = reply
            self.unique(f"answers {name}: the reply", reply)
        calls[name].answers = replies

    def line_retired(self, words):
        self.arity(words, 3, "retired KIND FIELD VERSION")
        kind, field, version = words
        if kind not in ("waiter", "holder"):
            self.fail(f"retired: '{kind}' is not waiter or holder (the hashes of many records)")
        if not NAME.fullmatch(field):
            self.fail(f"retired {kind}: '{field}' is not a Redis field of rlock's (a-z, 0-9 and _)")
        if not re.fullmatch(r"[1-9][0-9]*", version):
            self.fail(f"retired {kind} {field}: '{version}' is not a version")
        self.unique(f"{kind} (its Redis field)", field)
        self.protocol.retired[kind].append((field, int(version)))

    def line_header(self, words):
        p = self.protocol
        if p.header or not words:
            self.fail("one header line, with the fields every reply starts with")
        for field in words:
            self.name(field)
            if field == "size":
                self.fail("header: 'size' is a name the header reserves")
            p.header.append(self.unique("header field", field))

    def line_reply(self, words):
        if len(words) < 2:
            self.fail("reply NAME CODE [FIELD...]")
        name, code, *fields = words
        reply = Reply(self.unique("reply", self.name(name)), code)
        if not re.fullmatch(r"[0-9]+", code):
            self.fail(f"reply {name}: the code '{code}' is not a number")
        for i, field in enumerate(fields):
            if field.endswith("..."):
                field = field[: -len("...")]
                if i != len(fields) - 1:
                    self.fail(f"reply {name}: only the last field may be the rest (FIELD...)")
                reply.rest = field
            self.name(field)
            if field in ("code", "size"):
                self.fail(f"reply {name}: '{field}' is a name the header reserves")
            if field in self.protocol.header:
                self.fail(f"reply {name}: '{field}' is a header field")
            reply.fields.append(self.unique(f"reply {name}: the field", field))
        self.protocol.replies.append(reply)

    def line_key(self, words):
        self.arity(words, 3, "key PART LUA SUFFIX")
        part, lua, suffix = words
        self.name(part)
        self.name(lua)
        if not re.fullmatch(r"-|[a-z]+(:ID)?", suffix):
            self.fail(f"key {part}: the suffix '{suffix}' is not -, a word or WORD:ID")
        self.unique("key", part)
        self.unique("key (its Lua name)", lua)
        self.unique("key (its suffix)", suffix)
        self.protocol.keys.append((part, lua, suffix))

    def line_side(self, words):
        self.arity(words, 2, "side NAME SUFFIX")
        name, suffix = words
        self.name(name)
        if not re.fullmatch(r"[a-z]+", suffix):
            self.fail(f"side {name}: the suffix '{suffix}' is not a word")
        self.unique("side key", name)
        if suffix in self.seen.get("key (its suffix)", ()):
            self.fail(f"side {name}: the suffix '{suffix}' is a key's")
        self.unique("side key (its suffix)", suffix)
        self.protocol.sides.append((name, suffix))

    def line_event(self, words):
        self.arity(words, 1, "event NAME")
        self.protocol.events.append(self.unique("event", self.name(words[0])))

    def field_line(self, kind):
        """What reads a line KIND NAME FIELD (FIELD_KINDS)."""

        def read(words):
            self.arity(words, 2, f"{kind} NAME FIELD")
            name, field = words
            self.name(name)
            if kind == "summary" and re.fullmatch(r"[a-z][a-z0-9_]*\.", field):
                pass  # a prefix: FIELD<event>
            elif not NAME.fullmatch(field):
                self.fail(f"{kind} {name}: '{field}' is not a Redis field of rlock's (a-z, 0-9 and _)")
            self.unique(kind, name)
            self.unique(f"{kind} (its Redis field)", field)
            self.protocol.fields[kind].append((name, field))

        return read

    # ---- The file as a whole.

    def check(self):
        p = self.protocol
        if not p.header or not p.replies or not p.events or not p.fields["event_field"]:
            self.fail("a header, replies, events and event fields are needed")
        for field in ("code", "more", "push"):
            if field not in p.header:
                self.fail(f"the header needs the field '{field}' (lock/lease.cpp reads it)")
        if len(p.keys) < 3:
            self.fail("a lock needs its key, its companions and the caller's mailbox")
        suffixes = [suffix for _, _, suffix in p.keys]
        for _, suffix in p.sides:
            if suffix in suffixes:
                self.fail(f"the side key suffix '{suffix}' is a key's")
        if suffixes[0] != "-":  # (and no other: suffixes are unique)
            self.fail("the first key is the lock's own (suffix -)")
        if sum(s.endswith(":ID") for s in suffixes[1:]) != 1:
            self.fail("one key, not the first, is the caller's mailbox (WORD:ID)")
        if p.calls and not p.config:
            self.fail("calls need a config line (the arguments every script but the light ones starts with)")
        if p.calls and p.version is None:
            self.fail("calls need a version line (the data version written with the records)")
        for call in p.calls:
            if call.answers is None:
                self.fail(f"{'light' if call.light else 'call'} {call.name}: no answers line says what it answers")
        for name, fields in p.records.items():
            if not p.record_places(name):
                self.fail(f"record {name}: no field kind ({', '.join(RECORD_KINDS)}) names all its fields")
        for kind, retired in p.retired.items():
            for field, version in retired:
                if version >= (p.version or 1):
                    self.fail(f"retired {kind} {field}: version {version} is not before the version {p.version}")


def read_protocol(path):
    with open(path, encoding="utf-8", newline="") as f:
        return Reader(path).read(f.read())


# ---- protocol.hpp


def camel(name):
    """A record's name as a C++ type: who -> Who, exit_status -> ExitStatus."""
    return "".join(word.capitalize() for word in name.split("_"))


def call_arity(p, call):
    """The number of a call's fixed arguments, its configuration included."""
    fixed = sum(len(p.records[what]) if what in p.records else 1 for _, what in call.args if what != "rest")
    return fixed + (0 if call.light else len(p.config))


def call_indices(p, call):
    """Each argument's 1-based position in ARGV: (name, index, what)."""
    at = 1 if call.light else len(p.config) + 1
    out = []
    for name, what in call.args:
        out.append((name, at, what))
        at += len(p.records[what]) if what in p.records else 1
    return out


def cpp_record(p, name, fields):
    """A record's struct and the places of its fields."""
    n, kind = len(fields), camel(name)
    out = [f"// The record {name}, written whole wherever it goes: a call's arguments, and the fields of\n",
           f"// {', '.join(p.record_places(name))}, named as their own lines name them ({name}_fields::KIND).\n",
           f"struct {kind} {{\n"]
    # (Initialised, so that code that sets some fields by name still compiles when one is added.)
    out += [f"  std::string {field}{{}};\n" for field in fields]
    out.append("\n  // Its fields in order, after args' last.\n")
    out.append("  void append_to(std::vector<std::string>& args) const {\n")
    out += [f"    args.push_back({field});\n" for field in fields]
    out.append("  }\n  // Read from the fields of a place (get(FIELD): the value, empty when missing).\n")
    out.append("  template <class Get>\n")
    out.append(f"  static {kind} read(const std::array<std::string_view, {n}>& fields, const Get& get) {{\n")
    out.append(f"    {kind} r;\n")
    out += [f"    r.{field} = get(fields[{i}]);\n" for i, field in enumerate(fields)]
    out.append("    return r;\n  }\n")
    out.append("  // From its fields' values in order (one missing: empty).\n")
    out.append(f"  static {kind} from_values(const std::vector<std::string>& values) {{\n    {kind} r;\n")
    out += [f"    if (values.size() > {i}) r.{field} = values[{i}];\n" for i, field in enumerate(fields)]
    out.append("    return r;\n  }\n")
    out.append(f"  bool operator==(const {kind}&) const = default;\n}};\n")
    out.append(f"namespace {name}_fields {{\n")
    for place in p.record_places(name):
        names = ", ".join(f"{place}::{field}" for field in fields)
        out.append(f"inline constexpr std::array<std::string_view, {n}> {place} = {{{names}}};\n")
    out.append(f"}}  // namespace {name}_fields\n\n")
    return out


def cpp_call(p, call):
    """A call's struct: its arguments, args(), and Answer."""
    codes = {r.name: r.code for r in p.replies}
    words = " ".join(name + ("..." if what == "rest" else "") for name, what in call.args)
    out = [f"// {'light ' if call.light else ''}{call.name}: {words or '(nothing)'}\n", f"struct {call.name} {{\n"]
    for name, what in call.args:
        kind = "std::vector<std::string>" if what == "rest" else camel(what) if what in p.records else "std::string"
        out.append(f"  {kind} {name};\n")
    fixed = call_arity(p, call) - (0 if call.light else len(p.config))
    rest = [name for name, what in call.args if what == "rest"]
    out.append("\n  // The values in ARGV's order (after the configuration).\n")
    out.append("  std::vector<std::string> args() const {\n    std::vector<std::string> a;\n")
    out.append(f"    a.reserve({fixed}{f' + {rest[0]}.size()' if rest else ''});\n")
    for name, what in call.args:
        if what == "rest":
            out.append(f"    a.insert(a.end(), {name}.begin(), {name}.end());\n")
        elif what in p.records:
            out.append(f"    {name}.append_to(a);\n")
        else:
            out.append(f"    a.push_back({name});\n")
    out.append("    return a;\n  }\n")
    out.append("  // Each argument's place in ARGV, 0-based (the configuration's places first; a record's:\n")
    out.append("  // its first field's).\n  struct at {\n")
    out += [f"    static constexpr size_t {name} = {index - 1};\n" for name, index, _ in call_indices(p, call)]
    out.append("  };\n")
    answers = ", ".join(f"{r} = {codes[r]}" for r in call.answers)
    out.append(f"  // What it answers (the code of its reply).\n  enum class Answer : int64_t {{ {answers} }};\n}};\n")
    return out


def cpp_requests(p):
    """The requests: the data version, the configuration's positions, the records, the options and
    one struct a call."""
    out = []
    if p.version is not None:
        out.append("// The data version written with the records (:info, :w, :hi).\n")
        out.append(f"inline constexpr int k_data_version = {p.version};\n\n")
    if p.config:
        out.append("// The configuration that every script but the light ones is given first, by position.\n")
        out.append("namespace config {\n")
        out += [f"inline constexpr size_t {name} = {i};\n" for i, name in enumerate(p.config)]
        out.append(f"inline constexpr size_t size = {len(p.config)};\n}}  // namespace config\n\n")
    for name, fields in p.records.items():
        out += cpp_record(p, name, fields)
    if p.options:
        out.append("// A contender's options: letters in its options argument.\nnamespace option {\n")
        out += [f"inline constexpr char {name} = '{letter}';\n" for name, letter in p.options]
        out.append("}  // namespace option\n\n")
    if p.calls:
        out.append("// Each script's request: its arguments after the configuration, by name (args(): their\n")
        out.append("// values in ARGV's order), and what it answers.\nnamespace call {\n")
        for call in p.calls:
            out += cpp_call(p, call)
        out.append("}  // namespace call\n\n")
    return "".join(out)


def cpp_definitions(p):
    """The body of namespace rlock::lock::protocol (RLOCK_PROTOCOL_DEFINITIONS)."""
    out = []
    out.append("// The positions of the header that every reply starts with (its code: a call's Answer).\n")
    out.append("namespace header {\n")
    out += [f"inline constexpr size_t {field} = {i};\n" for i, field in enumerate(p.header)]
    out.append(f"inline constexpr size_t size = {len(p.header)};\n}}  // namespace header\n\n")
    out.append("// The positions of each reply's payload (after the header); size: its fixed fields. (Its code\n")
    out.append("// is a call's: call::NAME::Answer.)\nnamespace reply {\n")
    for r in p.replies:
        out.append(f"struct {r.name} {{\n")
        i = 0
        for field in r.fields:
            if field == r.rest:
                out.append(f"  static constexpr size_t {field} = {i};  // the first of the rest\n")
            else:
                out.append(f"  static constexpr size_t {field} = {i};\n")
                i += 1
        out.append(f"  static constexpr size_t size = {i};\n}};\n")
    out.append("}  // namespace reply\n\n")

    parts, before, after, cases, mailbox = [], [], [], [], ""
    for part, _, suffix in p.keys:
        if suffix == "-":
            continue
        if suffix.endswith(":ID"):
            mailbox = suffix[: -len(":ID")]
            continue
        parts.append(part)
        (after if mailbox else before).append(f"Part::{part}")
        cases.append(f'    case Part::{part}: return "{suffix}";\n')
    out.append("// The companions of a lock's key, PREFIX{KEY}:SUFFIX, in the order the scripts are given them:\n")
    out.append(f"// k_parts after the lock's key and before the caller's mailbox (PREFIX{{KEY}}:{mailbox}:ID),\n")
    out.append("// k_parts_after after it.\n")
    out.append(f"enum class Part {{ {', '.join(parts)} }};\n")
    out.append(f"inline constexpr std::array<Part, {len(before)}> k_parts = {{{', '.join(before)}}};\n")
    out.append(f"inline constexpr std::array<Part, {len(after)}> k_parts_after = {{{', '.join(after)}}};\n")
    out.append(f"constexpr std::string_view suffix(Part part) {{\n  switch (part) {{\n{''.join(cases)}  }}\n")
    out.append('  return "";\n}\n')
    out.append(f'inline constexpr std::string_view k_mailbox = "{mailbox}";\n\n')
    out.append("// The keys of a lock that no script is given, PREFIX{KEY}:SUFFIX.\nnamespace side {\n")
    out += [f'inline constexpr std::string_view {name} = "{suffix}";\n' for name, suffix in p.sides]
    out.append("}  // namespace side\n\n")

    for kind, _, doc in FIELD_KINDS:
        fields = p.fields[kind]
        names = [name for name, _ in fields]
        out.append(f"// {doc}; k_all: every one.\nnamespace {kind} {{\n")
        out += [f'inline constexpr std::string_view {name} = "{field}";\n' for name, field in fields]
        out.append(f"inline constexpr std::array<std::string_view, {len(names)}> k_all = {{{', '.join(names)}}};\n")
        out.append("// Their names, in k_all's order (the Lua prelude's keys).\n")
        quoted = ", ".join(f'"{name}"' for name in names)
        out.append(f"inline constexpr std::array<std::string_view, {len(names)}> k_names = {{{quoted}}};\n")
        out.append(f"}}  // namespace {kind}\n\n")
    out.append("// The kinds of history event (the field event_field::kind).\nnamespace event {\n")
    out += [f'inline constexpr std::string_view {name} = "{name}";\n' for name in p.events]
    out.append(f"inline constexpr std::array<std::string_view, {len(p.events)}> k_all = {{{', '.join(p.events)}}};\n")
    out.append("}  // namespace event\n")

    out.append("\n" + cpp_requests(p))
    # The prelude is in the header too, for the tests that check the two agree.
    out.append("\n// The Lua prelude that goes in front of every lock script (lock/scripts.hpp).\n")
    out.append(f'inline constexpr std::string_view k_lua_prelude = R"lua({lua_prelude(p)})lua";\n')
    return "".join(out)


def lua_prelude(p):
    """The Lua prelude: the protocol's names as constant tables (see protocol.txt)."""

    def table(entries):
        return "{" + ", ".join(entries) + "}"

    def quoted(text):
        return "'" + text + "'"

    out = ["-- Generated from src/lock/protocol.txt, the protocol's names (see there).\n"]
    if p.version is not None:
        out.append(f"local VERSION = '{p.version}'\n")
    if p.config:
        out.append(f"local CFG = {table(f'{name} = {i}' for i, name in enumerate(p.config, 1))}\n")
    if p.calls:
        out.append("local A = {\n")
        for call in p.calls:
            out.append(f"  {call.name} = {table(f'{name} = {i}' for name, i, _ in call_indices(p, call))},\n")
        out.append("}\n")
    if p.options:
        out.append(f"local OPT = {table(f'{name} = {quoted(letter)}' for name, letter in p.options)}\n")
    if p.records:
        # Each record: its fields' names, each place's field names in the same order, and
        # constructors (one table constructor each, where a loop would grow the table field by
        # field): args(a, at), the record from the list a, from index at on; from.PLACE(v), from a
        # table keyed by that place's field names; list.PLACE(r, ...), the list of record r's
        # fields as that place names them, each followed by its value, then the values given (a
        # field missing is ''); fields.PLACE(...), the field names of that place, then the names
        # given (for one HMGET).
        out.append("local RECORD = {\n")
        for name, fields in p.records.items():
            places = [f"names = {table(quoted(f) for f in fields)}"]
            makers, lists, names = [], [], []
            for kind in p.record_places(name):
                named = dict(p.fields[kind])
                places.append(f"{kind} = {table(quoted(named[f]) for f in fields)}")
                values = table(f"[{quoted(f)}] = v[{quoted(named[f])}] or ''" for f in fields)
                makers.append(f"{kind} = function(v) return {values} end")
                pairs = ", ".join(f"{quoted(named[f])}, r[{quoted(f)}] or ''" for f in fields)
                lists.append(f"{kind} = function(r, ...) return {{{pairs}, ...}} end")
                names.append(f"{kind} = function(...) return {{{', '.join(quoted(named[f]) for f in fields)}, ...}} end")
            at = table(f"[{quoted(f)}] = a[at{f' + {i}' if i else ''}] or ''" for i, f in enumerate(fields))
            out.append(f"  {name} = {{{', '.join(places)},\n")
            out.append(f"    args = function(a, at) return {at} end,\n")
            out.append(f"    from = {table(makers)},\n")
            out.append(f"    list = {table(lists)},\n")
            out.append(f"    fields = {table(names)}}},\n")
        out.append("}\n")
    for kind in ("waiter", "holder"):
        if p.retired[kind]:
            # Every field a record of :w or :hi may have, those that earlier versions wrote included.
            every = [field for _, field in p.fields[kind]] + [field for field, _ in p.retired[kind]]
            out.append(f"local {kind.upper()}_ALL = {table(quoted(field) for field in every)}\n")
    out.append(f"local CODE = {table(f'{r.name} = {r.code}' for r in p.replies)}\n")
    out.append(f"local AT = {{\n  header = {table(f'{f} = {i}' for i, f in enumerate(p.header, 1))},\n")
    for r in p.replies:
        out.append(f"  {r.name} = {table(f'{f} = {i}' for i, f in enumerate(r.fields, len(p.header) + 1))},\n")
    out.append("}\n")
    out.append(f"local KEY = {table(f'{lua} = {i}' for i, (_, lua, _) in enumerate(p.keys, 1))}\n")
    for kind, lua_table, _ in FIELD_KINDS:
        out.append(f"local {lua_table} = {table(f'{name} = {quoted(field)}' for name, field in p.fields[kind])}\n")
    out.append(f"local EVENT = {table(f'{name} = {quoted(name)}' for name in p.events)}\n")
    return "".join(out)


# ---- scripts.hpp

BEGIN = "\nbegin(KEYS, ARGV)\n"


def read_text(path):
    with open(path, encoding="utf-8", newline="") as f:
        return f.read()


def placeholders(path, text, values, unknown):
    """text with each @NAME@ replaced by values[NAME]; an @NAME@ not in values fails at its line
    with "@NAME@ " + unknown."""

    def value(match):
        if match.group(1) not in values:
            line = text.count("\n", 0, match.start()) + 1
            raise Failure(path, line, f"{match.group(0)} {unknown}")
        return values[match.group(1)]

    return re.sub(r"@([A-Za-z_]+)@", value, text)


def light_source(p, path, text):
    """A light script's source with the reply codes and argument positions it names put in
    (@reply_NAME_code@, @arg_CALL_ARG@): it goes without the prelude."""
    codes = {f"reply_{r.name}_code": r.code for r in p.replies}
    for call in p.calls:
        codes.update({f"arg_{call.name}_{name}": str(i) for name, i, _ in call_indices(p, call)})

    return placeholders(path, text, codes, "names nothing of lock/protocol.txt")


def named_arguments_only(path, text):
    """A script reads its arguments by their names in protocol.txt (arg(A.CALL.NAME), CFG.NAME;
    @arg_CALL_NAME@ in a light script), never by a position written in it."""
    for number, line in enumerate(text.split("\n"), 1):
        code = line.split("--", 1)[0]
        if re.search(r"ARGV\[\s*\d", code):
            raise Failure(path, number, "reads ARGV by a position: name the argument in protocol.txt "
                          "(arg(A.CALL.NAME); @arg_CALL_NAME@ in a light script)")


def without_comment_lines(text):
    """text without the lines that are a comment alone (the first line stays: no line break
    before it)."""
    return re.sub(r"\n[ \t]*--[^\n]*", "", text)


class Scripts:
    """The lock scripts as the build makes them: each one's source as EVAL runs it, and the
    function library of all of them (Redis 7+: FUNCTION LOAD, FCALL)."""

    def __init__(self, p, common_paths, script_paths, light_paths):
        """common_paths: the files of the code every script shares, in order (one path alone is a
        list of one); exactly one of them has the line begin(KEYS, ARGV)."""
        if isinstance(common_paths, str):
            common_paths = [common_paths]
        prelude = lua_prelude(p)
        commons = [(path, read_text(path)) for path in common_paths]
        for path, text in commons:
            named_arguments_only(path, text)
        for path in [*script_paths, *light_paths]:
            named_arguments_only(path, read_text(path))
        common = "".join(text for _, text in commons)
        self.common = prelude + common
        # The line begin(KEYS, ARGV): the library has the shared code without it.
        with_begin = [path for path, text in commons if BEGIN.strip() in text.split("\n")]
        if len(with_begin) != 1 or common.split("\n").count(BEGIN.strip()) != 1 or \
                BEGIN not in "\n" + dict(commons)[with_begin[0]]:
            raise Failure(common_paths[-1] if len(commons) == 1 else ", ".join(common_paths), 0,
                          "no line 'begin(KEYS, ARGV)', or more than one")
        self.sources = []  # (name, its source as EVAL runs it)
        # The library's text before its comment lines go, piece by piece, each with where it comes
        # from: (text, path, the line there of its first line; None: the library's own line).
        self.pieces = [(prelude, PRELUDE, 1)]
        for path, text in commons:
            if path != with_begin[0]:
                self.pieces.append((text, path, 1))
                continue
            begin = ("\n" + text).find(BEGIN)
            self.pieces += [(text[:begin], path, 1),
                            (text[begin + len(BEGIN) - 1:], path, text.count("\n", 0, begin) + 2)]
        for path in script_paths:
            name, own = script_name(path), read_text(path)
            # (Without its comment lines, as the library: a C++ compiler need not take a string
            # literal longer than 64 KiB, and EVAL sends it whole.)
            self.sources.append((name, without_comment_lines(f"{self.common}\n{own}")))
            self.add_function(name, path, own, BEGIN[1:])
        for path in light_paths:
            name, own = script_name(path), light_source(p, path, read_text(path))
            self.sources.append((name, own))
            self.add_function(name, path, own, "")

    def add_function(self, name, path, own, begin):
        self.pieces += [(f"\nredis.register_function('@RLOCK_LIBRARY@_{name}', function(KEYS, ARGV)\n{begin}", path, None),
                        (own, path, 1), ("\nend)\n", path, None)]

    def library(self):
        """The library's name and its text. It goes without its comment lines: C++ compilers need
        not take a longer string literal than 64 KiB, and FUNCTION LOAD sends it whole. Its name
        carries a hash of its text, so that two versions of rlock can use one server at once."""
        body = without_comment_lines("".join(text for text, _, _ in self.pieces))
        name = "rlock_" + sha1(body)[:12]
        return name, f"#!lua name={name}\n" + body.replace("@RLOCK_LIBRARY@", name)

    def definitions(self, library_name):
        """RLOCK_SCRIPT_DEFINITIONS: one redis::Script a script."""
        return "".join(
            f'inline constexpr redis::Script k_{name}{{"{name}", R"lua({source})lua", "{sha1(source)}",\n'
            f'                                        "{library_name}_{name}", k_library}};\n'
            for name, source in self.sources)

    def lint_source(self):
        """The library with its comments (luacheck's inline options among them), and where each of
        its lines comes from: [(path, line)], line None for a line of the library's own."""
        pieces = [("-- luacheck: push no max line length\n", PRELUDE, None)] + self.pieces[:1] + [
            ("-- luacheck: pop\n", PRELUDE, None)] + self.pieces[1:]
        origins, open_line = [], False  # open_line: the last piece did not end its last line
        for text, path, first in pieces:
            for i in range(text.count("\n") + 1):
                if i > 0 or not open_line:  # (a line that a piece goes on keeps its origin)
                    origins.append((path, None if first is None else first + i))
            open_line = not text.endswith("\n")
            if not open_line:
                origins.pop()  # the line after its last line break is the next piece's
        text = "".join(text for text, _, _ in pieces).replace("@RLOCK_LIBRARY@", "rlock")
        return text, origins


PRELUDE = "the Lua prelude (src/lock/protocol.txt)"


def script_name(path):
    return os.path.splitext(os.path.basename(path))[0]


def sha1(text):
    return hashlib.sha1(text.encode("utf-8")).hexdigest()


# ---- Output


def configure(template_path, values):
    """The template with each @NAME@ replaced by values[NAME], as CMake's configure_file @ONLY."""
    return placeholders(template_path, read_text(template_path), values, "is not something the generator makes")


def write(path, text):
    """Writes path whole or not at all (a failed build leaves no half header behind)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    os.replace(tmp, path)


def luacheck(scripts, program, config):
    """Runs luacheck on the scripts' lint source; its messages, each at its source's file and line,
    and whether it found nothing."""
    text, origins = scripts.lint_source()
    run = subprocess.run([program, "--formatter", "plain", "--codes", "--no-color", "--config", config,
                          "--filename", "library.lua", "-"], input=text, capture_output=True, text=True, check=False)
    out = []
    for message in (run.stdout + run.stderr).splitlines():
        at = re.match(r"library\.lua:(\d+):(\d+)(?:-\d+)?: (.*)", message)
        if at:
            # "on line N" (where a shadowed or redefined name was defined) is the library's too.
            said = re.sub(r"on line (\d+)", lambda m: "at " + origin(origins, m.group(1)), at.group(3))
            message = f"{origin(origins, at.group(1), at.group(2))}: {said}"
        out.append(message)
    return out, run.returncode == 0


def origin(origins, line, column=None):
    """Where line (of the lint source) comes from: PATH:LINE[:COLUMN]."""
    if not 0 < int(line) <= len(origins):
        return f"library.lua:{line}"
    path, source_line = origins[int(line) - 1]
    if source_line is None:
        return f"{relative(path)} (the line of the library around it)"
    return f"{relative(path)}:{source_line}" + (f":{column}" if column else "")


def relative(path):
    """path relative to the working directory, if it is under it."""
    if not os.path.isabs(path):
        return path
    rel = os.path.relpath(path)
    return path if rel.startswith("..") else rel


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    proto = sub.add_parser("protocol", help="generated/lock/protocol.hpp")
    scripts = sub.add_parser("scripts", help="generated/lock/scripts.hpp")
    lint = sub.add_parser("luacheck", help="luacheck on the scripts as the server runs them")
    for command in (proto, scripts, lint):
        command.add_argument("protocol")
    for command in (proto, scripts):
        command.add_argument("template")
        command.add_argument("output")
    for command in (scripts, lint):
        command.add_argument("--common", required=True, nargs="+", metavar="LUA")
        command.add_argument("--scripts", nargs="+", default=[], metavar="LUA")
        command.add_argument("--light", nargs="*", default=[], metavar="LUA")
    lint.add_argument("--config", required=True)
    lint.add_argument("--luacheck", default="luacheck", metavar="PROGRAM")
    args = parser.parse_args(argv)
    try:
        p = read_protocol(args.protocol)
        if args.command == "protocol":
            write(args.output, configure(args.template, {"RLOCK_PROTOCOL_DEFINITIONS": cpp_definitions(p)}))
        elif args.command == "luacheck":
            messages, clean = luacheck(Scripts(p, args.common, args.scripts, args.light), args.luacheck, args.config)
            for message in messages:
                print(message)
            return 0 if clean else 1
        else:
            s = Scripts(p, args.common, args.scripts, args.light)
            name, library = s.library()
            write(args.output, configure(args.template, {
                "RLOCK_LIBRARY": name,
                "RLOCK_LIBRARY_SOURCE": library,
                "RLOCK_SCRIPT_DEFINITIONS": s.definitions(name),
            }))
    except Failure as e:
        print(e, file=sys.stderr)
        return 1
    except OSError as e:
        hint = " (Debian's package lua-check)" if e.filename == getattr(args, "luacheck", None) else ""
        print(f"{e.filename}: {e.strerror}{hint}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
