#!/usr/bin/env python3
"""Tests of src/lock/generate.py, the lock protocol's generator: each kind of line of
protocol.txt, what the C++ header and the Lua prelude make of them, the scripts' assembly, and
malformed input (each fails with FILE:LINE: what is wrong). CTest runs it as unit.generate."""

import contextlib
import io
import os
import shutil
import sys
import tempfile
import unittest

sys.dont_write_bytecode = True  # no __pycache__ in the source tree
SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "src", "lock")
sys.path.insert(0, SOURCE)
import generate  # noqa: E402

# The least a protocol needs; each test adds lines or changes one.
MINIMAL = """\
header code more push
reply ok 1 fence
key lock lock -
key queue q q
key mailbox mb mb:ID
event acquired
event_field kind e
"""


def read(text, path="protocol.txt"):
    return generate.Reader(path).read(text)


class Lines(unittest.TestCase):
    """Each kind of line, and what the outputs make of it."""

    def test_header(self):
        p = read(MINIMAL.replace("header code more push", "header code more push extra"))
        self.assertEqual(p.header, ["code", "more", "push", "extra"])
        cpp = generate.cpp_definitions(p)
        self.assertIn("inline constexpr size_t extra = 3;\ninline constexpr size_t size = 4;\n", cpp)
        self.assertIn("  header = {code = 1, more = 2, push = 3, extra = 4},\n", generate.lua_prelude(p))

    def test_reply(self):
        p = read(MINIMAL + "reply waiting 3 position watch...\n# a comment\nreply again 4\n")
        names = [(r.name, r.code, r.fields, r.rest) for r in p.replies]
        self.assertEqual(names, [("ok", "1", ["fence"], None), ("waiting", "3", ["position", "watch"], "watch"),
                                 ("again", "4", [], None)])
        cpp = generate.cpp_definitions(p)
        self.assertNotIn("enum class Code", cpp, "codes are each call's: call::NAME::Answer")
        self.assertIn("struct waiting {\n"
                      "  static constexpr size_t position = 0;\n"
                      "  static constexpr size_t watch = 1;  // the first of the rest\n"
                      "  static constexpr size_t size = 1;\n};\n", cpp)
        self.assertIn("struct again {\n  static constexpr size_t size = 0;\n};\n", cpp)
        lua = generate.lua_prelude(p)
        self.assertIn("local CODE = {ok = 1, waiting = 3, again = 4}\n", lua)
        self.assertIn("  waiting = {position = 4, watch = 5},\n  again = {},\n", lua)

    def test_codes_may_repeat(self):
        p = read(MINIMAL + "reply done 1\n")
        self.assertEqual([r.code for r in p.replies], ["1", "1"])

    def test_keys(self):
        p = read(MINIMAL.replace("key mailbox mb mb:ID\n", "key mailbox mb mb:ID\nkey summary sum sum\n"))
        self.assertEqual(p.keys, [("lock", "lock", "-"), ("queue", "q", "q"), ("mailbox", "mb", "mb:ID"),
                                  ("summary", "sum", "sum")])
        cpp = generate.cpp_definitions(p)
        self.assertIn("// k_parts after the lock's key and before the caller's mailbox (PREFIX{KEY}:mb:ID),\n", cpp)
        self.assertIn("enum class Part { queue, summary };\n"
                      "inline constexpr std::array<Part, 1> k_parts = {Part::queue};\n"
                      "inline constexpr std::array<Part, 1> k_parts_after = {Part::summary};\n", cpp)
        self.assertIn('    case Part::queue: return "q";\n    case Part::summary: return "sum";\n  }\n', cpp)
        self.assertIn('inline constexpr std::string_view k_mailbox = "mb";\n', cpp)
        self.assertIn("local KEY = {lock = 1, q = 2, mb = 3, sum = 4}\n", generate.lua_prelude(p))

    def test_side(self):
        p = read(MINIMAL + "side policy policy\n")
        self.assertEqual(p.sides, [("policy", "policy")])
        self.assertIn('namespace side {\ninline constexpr std::string_view policy = "policy";\n}  // namespace side\n',
                      generate.cpp_definitions(p))

    def test_event(self):
        p = read(MINIMAL + "event busy\n")
        self.assertEqual(p.events, ["acquired", "busy"])
        self.assertIn('inline constexpr std::string_view busy = "busy";\n'
                      "inline constexpr std::array<std::string_view, 2> k_all = {acquired, busy};\n",
                      generate.cpp_definitions(p))
        self.assertIn("local EVENT = {acquired = 'acquired', busy = 'busy'}\n", generate.lua_prelude(p))

    def test_each_kind_of_field(self):
        for kind, table, _ in generate.FIELD_KINDS:
            with self.subTest(kind=kind):
                p = read(MINIMAL + f"{kind} linger_until lu\n{kind} host h\n")
                expected = [("linger_until", "lu"), ("host", "h")]
                if kind == "event_field":
                    expected.insert(0, ("kind", "e"))
                self.assertEqual(p.fields[kind], expected)
                cpp = generate.cpp_definitions(p)
                names = ", ".join(name for name, _ in expected)
                quoted = ", ".join(f'"{name}"' for name, _ in expected)
                self.assertIn(f'namespace {kind} {{\n', cpp)
                self.assertIn(f'inline constexpr std::string_view linger_until = "lu";\n'
                              f'inline constexpr std::string_view host = "h";\n'
                              f"inline constexpr std::array<std::string_view, {len(expected)}> k_all = {{{names}}};\n"
                              "// Their names, in k_all's order (the Lua prelude's keys).\n"
                              f"inline constexpr std::array<std::string_view, {len(expected)}> k_names = {{{quoted}}};\n"
                              f"}}  // namespace {kind}\n", cpp)
                self.assertIn(f"local {table} = {{", generate.lua_prelude(p))
                self.assertIn("linger_until = 'lu', host = 'h'}\n", generate.lua_prelude(p))

    def test_a_summary_field_may_be_a_prefix(self):
        p = read(MINIMAL + "summary count n.\n")
        self.assertEqual(p.fields["summary"], [("count", "n.")])
        self.assertIn("local SUM = {count = 'n.'}\n", generate.lua_prelude(p))

    def test_comments_blank_lines_and_spacing(self):
        p = read("# a comment\n\n   \n" + MINIMAL.replace("reply ok 1 fence", "reply\tok  1 fence   # trailing"))
        self.assertEqual(p.replies[0].fields, ["fence"])

    def test_the_whole_prelude(self):
        self.assertEqual(generate.lua_prelude(read(MINIMAL)), """\
-- Generated from src/lock/protocol.txt, the protocol's names (see there).
local CODE = {ok = 1}
local AT = {
  header = {code = 1, more = 2, push = 3},
  ok = {fence = 4},
}
local KEY = {lock = 1, q = 2, mb = 3}
local INFO = {}
local WAITER = {}
local HOLDER = {}
local SEM = {}
local TICK = {}
local SUM = {}
local OUTCOME = {}
local EV = {kind = 'e'}
local EVENT = {acquired = 'acquired'}
""")
        cpp = generate.cpp_definitions(read(MINIMAL))
        self.assertTrue(cpp.endswith('inline constexpr std::string_view k_lua_prelude = R"lua(-- Generated from'
                                     + generate.lua_prelude(read(MINIMAL))[len("-- Generated from"):] + ')lua";\n'))

    def test_version_config_and_options(self):
        p = read("version 3\nconfig lease claim\noption queue q\noption preempt p\n" + MINIMAL)
        self.assertEqual((p.version, p.config, p.options), (3, ["lease", "claim"], [("queue", "q"), ("preempt", "p")]))
        cpp = generate.cpp_definitions(p)
        self.assertIn("inline constexpr int k_data_version = 3;\n", cpp)
        self.assertIn("namespace config {\ninline constexpr size_t lease = 0;\ninline constexpr size_t claim = 1;\n"
                      "inline constexpr size_t size = 2;\n}  // namespace config\n", cpp)
        self.assertIn("namespace option {\ninline constexpr char queue = 'q';\ninline constexpr char preempt = 'p';\n"
                      "}  // namespace option\n", cpp)
        lua = generate.lua_prelude(p)
        self.assertIn("local VERSION = '3'\nlocal CFG = {lease = 1, claim = 2}\n", lua)
        self.assertIn("local OPT = {queue = 'q', preempt = 'p'}\n", lua)

    REQUESTS = ("version 2\nconfig lease claim\nrecord who host pid\n" + MINIMAL +
                "reply busy 0 pttl\ninfo host host\ninfo pid pid\nwaiter host h\nwaiter pid p\nwaiter cmd c\n"
                "event_field host h\n"
                "call take token who tick enclosing...\nanswers take ok busy\n"
                "light beat id epoch\nanswers beat ok\n")

    def test_records_and_calls(self):
        p = read(self.REQUESTS)
        self.assertEqual(p.records, {"who": ["host", "pid"]})
        self.assertEqual(p.record_places("who"), ["info", "waiter"], "event_field lacks pid")
        take = p.call("take")
        self.assertEqual((take.light, take.args, take.answers),
                         (False, [("token", "arg"), ("who", "who"), ("tick", "arg"), ("enclosing", "rest")],
                          ["ok", "busy"]))
        self.assertEqual(generate.call_indices(p, take),
                         [("token", 3, "arg"), ("who", 4, "who"), ("tick", 6, "arg"), ("enclosing", 7, "rest")])
        self.assertEqual(generate.call_indices(p, p.call("beat")), [("id", 1, "arg"), ("epoch", 2, "arg")])
        cpp = generate.cpp_definitions(p)
        self.assertIn("struct Who {\n  std::string host{};\n  std::string pid{};\n", cpp)
        self.assertIn("    r.host = get(fields[0]);\n    r.pid = get(fields[1]);\n", cpp)
        self.assertIn("namespace who_fields {\n"
                      "inline constexpr std::array<std::string_view, 2> info = {info::host, info::pid};\n"
                      "inline constexpr std::array<std::string_view, 2> waiter = {waiter::host, waiter::pid};\n"
                      "}  // namespace who_fields\n", cpp)
        self.assertIn("struct take {\n  std::string token;\n  Who who;\n  std::string tick;\n"
                      "  std::vector<std::string> enclosing;\n", cpp)
        self.assertIn("    a.reserve(4 + enclosing.size());\n    a.push_back(token);\n    who.append_to(a);\n"
                      "    a.push_back(tick);\n    a.insert(a.end(), enclosing.begin(), enclosing.end());\n", cpp)
        self.assertIn("  enum class Answer : int64_t { ok = 1, busy = 0 };\n", cpp)
        self.assertIn("// light beat: id epoch\nstruct beat {\n", cpp)
        self.assertLess(cpp.index("namespace waiter {"), cpp.index("namespace who_fields {"), "fields first")
        lua = generate.lua_prelude(p)
        self.assertIn("local A = {\n  take = {token = 3, who = 4, tick = 6, enclosing = 7},\n"
                      "  beat = {id = 1, epoch = 2},\n}\n", lua)
        self.assertIn("local RECORD = {\n  who = {names = {'host', 'pid'}, info = {'host', 'pid'}, "
                      "waiter = {'h', 'p'},\n"
                      "    args = function(a, at) return {['host'] = a[at] or '', ['pid'] = a[at + 1] or ''} end,\n"
                      "    from = {info = function(v) return {['host'] = v['host'] or '', ['pid'] = v['pid'] or ''} end, "
                      "waiter = function(v) return {['host'] = v['h'] or '', ['pid'] = v['p'] or ''} end},\n"
                      "    list = {info = function(r, ...) return {'host', r['host'] or '', 'pid', r['pid'] or '', ...} end, "
                      "waiter = function(r, ...) return {'h', r['host'] or '', 'p', r['pid'] or '', ...} end},\n"
                      "    fields = {info = function(...) return {'host', 'pid', ...} end, "
                      "waiter = function(...) return {'h', 'p', ...} end}},\n}\n", lua)

    @unittest.skipUnless(shutil.which("lua5.1"), "lua5.1 is not installed")
    def test_record_constructors(self):
        """The prelude's record constructors, run: each field from its place, '' when missing."""
        import subprocess
        lua = generate.lua_prelude(read(self.REQUESTS)) + (
            "local r = RECORD.who.args({'x', 'H', false}, 2)\n"
            "local w = RECORD.who.from.waiter({h = 'h1', host = 'no'})\n"
            "local i = RECORD.who.from.info({pid = '7'})\n"
            "print(r.host, r.pid == '', w.host, w.pid == '', i.host == '', i.pid)\n"
            "print(table.concat(RECORD.who.list.waiter({host = 'H'}, 'x', 'y'), ','))\n"
            "print(table.concat(RECORD.who.fields.waiter('x'), ','))\n")
        run = subprocess.run(["lua5.1", "-"], input=lua, capture_output=True, text=True, check=False)
        self.assertEqual(run.stderr, "")
        self.assertEqual(run.stdout, "H\ttrue\th1\ttrue\ttrue\t7\nh,H,p,,x,y\nh,p,x\n")

    def test_retired_fields(self):
        p = read(self.REQUESTS + "retired waiter mh 1\nretired holder x 1\n")
        self.assertEqual(p.retired["waiter"], [("mh", 1)])
        self.assertIn("local WAITER_ALL = {'h', 'p', 'c', 'mh'}\nlocal HOLDER_ALL = {'x'}\n", generate.lua_prelude(p))

    def test_a_light_script_names_its_arguments(self):
        with tempfile.TemporaryDirectory() as d:
            common = os.path.join(d, "common.lua")
            light = os.path.join(d, "beat.lua")
            with open(common, "w") as f:
                f.write("begin(KEYS, ARGV)\n")
            with open(light, "w") as f:
                f.write("return ARGV[@arg_beat_epoch@] and @reply_ok_code@\n")
            s = generate.Scripts(read(self.REQUESTS), common, [], [light])
            self.assertEqual(s.sources, [("beat", "return ARGV[2] and 1\n")])

    def test_the_projects_own_protocol(self):
        p = generate.read_protocol(os.path.join(SOURCE, "protocol.txt"))
        self.assertEqual(p.header[:3], ["code", "more", "push"])
        self.assertEqual(p.keys[0][2], "-")


class Malformed(unittest.TestCase):
    """Malformed input fails, naming the file, the line and what is wrong."""

    def fails(self, text, line, message):
        with self.assertRaises(generate.Failure) as caught:
            read(text, "src/lock/protocol.txt")
        where = f"src/lock/protocol.txt:{line}: " if line else "src/lock/protocol.txt: "
        self.assertEqual(str(caught.exception), where + message)

    def replaced(self, old, new, line, message):
        self.assertIn(old, MINIMAL)
        self.fails(MINIMAL.replace(old, new), line, message)

    def added(self, lines, message):
        """The lines added at the end: the error is on the last."""
        self.fails(MINIMAL + lines, MINIMAL.count("\n") + lines.count("\n"), message)

    KINDS = ("version, config, record, option, call, light, answers, retired, header, reply, key, side, event, "
             "info, waiter, holder, sem, tick, summary, outcome, event_field")

    def test_unknown_kind(self):
        self.added("replies ok 1\n", f"unknown kind 'replies' ({self.KINDS})")

    def test_the_line_number_counts_comments_and_blank_lines(self):
        self.fails("# one\n\n# three\nbogus x\n" + MINIMAL, 4, f"unknown kind 'bogus' ({self.KINDS})")

    def test_malformed_requests(self):
        self.added("version\n", "version N")
        self.added("version 0\n", "version: '0' is not a whole number above 0")
        self.added("version 2\nversion 3\n", "one version line")
        self.added("config\n", "one config line, with the names of the configuration's arguments")
        self.added("config a a\n", "config argument 'a' is defined twice")
        self.added("record who\n", "record NAME FIELD...")
        self.added("record who host host\n", "record who: the field 'host' is defined twice")
        self.added("option queue\n", "option NAME LETTER")
        self.added("option queue Q\n", "option queue: 'Q' is not a letter (a-z)")
        self.added("option queue q\noption other q\n", "option (its letter) 'q' is defined twice")
        self.added("call\n", "call NAME [ARG...]")
        self.added("call take rest... token\n", "call take: only the last argument may be the rest (ARG...)")
        self.added("call take token token\n", "call take: the argument 'token' is defined twice")
        self.added("call take args\n", "call take: 'args' is a name the header reserves")
        self.added("call take Token\n", "'Token' is not a name (a-z, 0-9 and _, a letter first)")
        self.added("answers take ok\n", "answers take: no call or light line names 'take' before")
        self.added("call take\nanswers take gone\n", "answers take: no reply line names 'gone' before")
        self.added("reply done 1\ncall take\nanswers take ok done\n", "answers take: 'done' has the code of 'ok' (1)")
        self.added("call take\nanswers take ok\nanswers take ok\n", "answers take: the call's answers are given twice")
        self.added("retired queue x 1\n", "retired: 'queue' is not waiter or holder (the hashes of many records)")
        self.added("retired waiter X 1\n", "retired waiter: 'X' is not a Redis field of rlock's (a-z, 0-9 and _)")
        self.added("retired waiter x one\n", "retired waiter x: 'one' is not a version")
        self.added("waiter host h\nretired waiter h 1\n", "waiter (its Redis field) 'h' is defined twice")

    def test_malformed_requests_as_a_whole(self):
        self.fails("version 2\n" + MINIMAL + "call take\nanswers take ok\n", None,
                   "calls need a config line (the arguments every script but the light ones starts with)")
        self.fails("config a\n" + MINIMAL + "call take\nanswers take ok\n", None,
                   "calls need a version line (the data version written with the records)")
        self.fails("version 2\nconfig a\n" + MINIMAL + "call take\n", None,
                   "call take: no answers line says what it answers")
        self.fails("record who host\n" + MINIMAL, None,
                   "record who: no field kind (info, waiter, holder, event_field) names all its fields")
        self.fails("version 2\n" + MINIMAL + "retired waiter mh 2\n", None,
                   "retired waiter mh: version 2 is not before the version 2")

    def test_bad_names(self):
        for name in ("Ok", "1ok", "o-k", "ok.", "_ok"):
            with self.subTest(name=name):
                self.added(f"reply {name} 2\n", f"'{name}' is not a name (a-z, 0-9 and _, a letter first)")
        self.added("info x Host\n", "info x: 'Host' is not a Redis field of rlock's (a-z, 0-9 and _)")
        self.added("info x h.\n", "info x: 'h.' is not a Redis field of rlock's (a-z, 0-9 and _)")

    def test_keywords_of_either_language(self):
        for name in ("end", "local", "class", "delete"):
            with self.subTest(name=name):
                self.added(f"event {name}\n", f"'{name}' is a keyword of C++ or Lua, or a name the header reserves")

    def test_duplicate_names(self):
        self.added("reply ok 2\n", "reply 'ok' is defined twice")
        self.added("reply two 2 a a\n", "reply two: the field 'a' is defined twice")
        self.added("key queue x x\n", "key 'queue' is defined twice")
        self.added("key other q x\n", "key (its Lua name) 'q' is defined twice")
        self.added("key other x q\n", "key (its suffix) 'q' is defined twice")
        self.added("event acquired\n", "event 'acquired' is defined twice")
        self.added("info host h\ninfo host hh\n", "info 'host' is defined twice")
        self.added("info host h\ninfo other h\n", "info (its Redis field) 'h' is defined twice")
        self.added("side a x\nside a y\n", "side key 'a' is defined twice")
        self.added("side a x\nside b x\n", "side key (its suffix) 'x' is defined twice")
        self.added("header code\n", "one header line, with the fields every reply starts with")
        self.replaced("header code more push", "header code more push more", 1, "header field 'more' is defined twice")

    def test_a_name_may_repeat_across_kinds(self):
        p = read(MINIMAL + "info host h\nwaiter host h\nevent_field host h\n")
        self.assertEqual(p.fields["waiter"], [("host", "h")])

    def test_reply_code_not_a_number(self):
        for code in ("x", "1x", "-1", "1.5", "١"):
            with self.subTest(code=code):
                self.added(f"reply two {code}\n", f"reply two: the code '{code}' is not a number")

    def test_missing_fields(self):
        self.added("reply two\n", "reply NAME CODE [FIELD...]")
        self.added("event\n", "event NAME")
        self.added("side policy\n", "side NAME SUFFIX")
        for kind, _, _ in generate.FIELD_KINDS:
            with self.subTest(kind=kind):
                self.added(f"{kind} host\n", f"{kind} NAME FIELD")
        self.replaced("header code more push", "header", 1, "one header line, with the fields every reply starts with")

    def test_too_many_fields(self):
        self.added("event busy now\n", "event NAME")
        self.added("side policy policy x\n", "side NAME SUFFIX")
        self.added("info host h x\n", "info NAME FIELD")

    def test_a_key_line_with_the_wrong_arity(self):
        self.added("key other o\n", "key PART LUA SUFFIX")
        self.added("key other o o o\n", "key PART LUA SUFFIX")

    def test_bad_suffixes(self):
        for suffix in ("Q", "q1", "q:id", ":ID", "q:ID:ID"):
            with self.subTest(suffix=suffix):
                self.added(f"key other o {suffix}\n", f"key other: the suffix '{suffix}' is not -, a word or WORD:ID")
        self.added("side policy p:ID\n", "side policy: the suffix 'p:ID' is not a word")
        self.added("side policy q\n", "side policy: the suffix 'q' is a key's")

    def test_reply_fields(self):
        self.added("reply two 2 rest... last\n", "reply two: only the last field may be the rest (FIELD...)")
        self.added("reply two 2 code\n", "reply two: 'code' is a name the header reserves")
        self.added("reply two 2 size\n", "reply two: 'size' is a name the header reserves")
        self.added("reply two 2 more\n", "reply two: 'more' is a header field")
        self.replaced("header code more push", "header code more push size", 1,
                      "header: 'size' is a name the header reserves")

    def test_the_file_as_a_whole(self):
        needed = "a header, replies, events and event fields are needed"
        self.replaced("header code more push\n", "", None, needed)
        self.replaced("reply ok 1 fence\n", "", None, needed)
        self.replaced("event acquired\n", "", None, needed)
        self.replaced("event_field kind e\n", "", None, needed)
        self.replaced("header code more push", "header code more", None,
                      "the header needs the field 'push' (lock/lease.cpp reads it)")
        self.replaced("key queue q q\n", "", None, "a lock needs its key, its companions and the caller's mailbox")
        self.replaced("key lock lock -\n", "key lock lock l\nkey other o o\n", None,
                      "the first key is the lock's own (suffix -)")
        self.replaced("key mailbox mb mb:ID", "key mailbox mb mb", None,
                      "one key, not the first, is the caller's mailbox (WORD:ID)")
        self.fails(MINIMAL + "key other o o:ID\n", None, "one key, not the first, is the caller's mailbox (WORD:ID)")
        self.fails("side policy q\n" + MINIMAL, None, "the side key suffix 'q' is a key's")


class Scripts(unittest.TestCase):
    """The scripts as the build assembles them into lock/scripts.hpp."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.protocol = read(MINIMAL + "reply stale 8\n")

    def file(self, name, text):
        path = os.path.join(self.dir.name, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def test_full_and_light_scripts(self):
        common = self.file("common.lua", "-- common\nlocal x = 1\nbegin(KEYS, ARGV)\n")
        full = self.file("take.lua", "  -- take\nreturn reply(CODE.ok)\n")
        light = self.file("beat.lua", "-- beat\nif x then return @reply_stale_code@ end\nreturn @reply_ok_code@\n")
        s = generate.Scripts(self.protocol, common, [full], [light])
        prelude = generate.lua_prelude(self.protocol)
        self.assertEqual(s.sources, [
            # Without its comment lines (the prelude's first stays: no line break before it).
            ("take", prelude.split("\n")[0] + "\n" + "\n".join(line for line in prelude.split("\n")[1:]
                                                              if not line.lstrip().startswith("--"))
             + "local x = 1\nbegin(KEYS, ARGV)\n\nreturn reply(CODE.ok)\n"),
            ("beat", "-- beat\nif x then return 8 end\nreturn 1\n"),
        ])
        name, library = s.library()
        # Without its comment lines, but the first (no line break before it).
        body = (prelude + "local x = 1\n"
                "\nredis.register_function('@RLOCK_LIBRARY@_take', function(KEYS, ARGV)\nbegin(KEYS, ARGV)"
                "\nreturn reply(CODE.ok)\n\nend)\n"
                "\nredis.register_function('@RLOCK_LIBRARY@_beat', function(KEYS, ARGV)"
                "\nif x then return 8 end\nreturn 1\n\nend)\n")
        self.assertEqual(name, "rlock_" + generate.sha1(body)[:12])
        self.assertEqual(library, f"#!lua name={name}\n" + body.replace("@RLOCK_LIBRARY@", name))
        definitions = s.definitions(name)
        self.assertIn(f'inline constexpr redis::Script k_beat{{"beat", R"lua({s.sources[1][1]})lua", '
                      f'"{generate.sha1(s.sources[1][1])}",\n                                        '
                      f'"{name}_beat", k_library}};\n', definitions)

    def test_a_script_reading_an_argument_by_its_position(self):
        common = self.file("common.lua", "local n = ARGV[CFG.lease] -- not ARGV[1]\nbegin(KEYS, ARGV)\n")
        ok = self.file("ok.lua", "return reply(CODE.ok, arg(A.call.x)) -- ARGV[2] in a comment\n")
        generate.Scripts(self.protocol, common, [ok], [])
        for name, text, line in (("take.lua", "local a = 1\nlocal t = ARGV[ 2]\n", 2),
                                 ("beat.lua", "return ARGV[1]\n", 1)):
            path = self.file(name, text)
            with self.assertRaises(generate.Failure) as caught:
                generate.Scripts(self.protocol, common, [path] if name == "take.lua" else [], [path])
            self.assertEqual(str(caught.exception), f"{path}:{line}: reads ARGV by a position: name the argument "
                             "in protocol.txt (arg(A.CALL.NAME); @arg_CALL_NAME@ in a light script)")
        bad_common = self.file("common2.lua", "local n = ARGV[3]\nbegin(KEYS, ARGV)\n")
        with self.assertRaises(generate.Failure):
            generate.Scripts(self.protocol, bad_common, [], [])

    def test_a_light_script_naming_no_reply(self):
        common = self.file("common.lua", "begin(KEYS, ARGV)\n")
        light = self.file("beat.lua", "-- beat\n\nreturn @reply_gone_code@\n")
        with self.assertRaises(generate.Failure) as caught:
            generate.Scripts(self.protocol, common, [], [light])
        self.assertEqual(str(caught.exception), f"{light}:3: @reply_gone_code@ names nothing of lock/protocol.txt")

    def test_common_without_begin_or_with_two(self):
        for text in ("local x = 1\n", "local x = 1\nbegin(KEYS, ARGV) \n", "begin(KEYS, ARGV)\nbegin(KEYS, ARGV)\n"):
            with self.subTest(text=text):
                common = self.file("common.lua", text)
                with self.assertRaises(generate.Failure) as caught:
                    generate.Scripts(self.protocol, common, [], [])
                self.assertEqual(str(caught.exception), f"{common}: no line 'begin(KEYS, ARGV)', or more than one")

    def test_shared_code_in_several_files(self):
        first = self.file("call.lua", "-- call\nlocal x = 1\nbegin(KEYS, ARGV)\nlocal y = 2\n")
        second = self.file("queue.lua", "-- queue\nlocal q = x + y\n")
        full = self.file("take.lua", "return q\n")
        s = generate.Scripts(self.protocol, [first, second], [full], [])
        prelude = generate.lua_prelude(self.protocol)
        self.assertEqual(s.sources, [("take", generate.without_comment_lines(
            prelude + "-- call\nlocal x = 1\nbegin(KEYS, ARGV)\nlocal y = 2\n-- queue\nlocal q = x + y\n\nreturn q\n"))])
        self.assertNotIn("-- queue", s.sources[0][1])
        text, origins = s.lint_source()
        lines = text.split("\n")
        at = {line: origins[i] for i, line in enumerate(lines[:len(origins)])}
        self.assertEqual(at["local y = 2"], (first, 4))
        self.assertEqual(at["local q = x + y"], (second, 2))
        # The line begin(KEYS, ARGV) in none of them, or in two.
        for files in ([second], [first, self.file("again.lua", "begin(KEYS, ARGV)\n")]):
            with self.subTest(files=files), self.assertRaises(generate.Failure) as caught:
                generate.Scripts(self.protocol, files, [full], [])
            self.assertIn("no line 'begin(KEYS, ARGV)', or more than one", str(caught.exception))

    def test_the_lint_source_and_where_its_lines_come_from(self):
        common = self.file("common.lua", "-- common\nlocal x = 1\nbegin(KEYS, ARGV)\nlocal y = 2\n")
        full = self.file("take.lua", "local z = x\nreturn z")  # no line break at its end
        light = self.file("beat.lua", "return @reply_stale_code@\n")
        text, origins = generate.Scripts(self.protocol, common, [full], [light]).lint_source()
        prelude = generate.lua_prelude(self.protocol).splitlines()
        lines = text.split("\n")
        self.assertEqual(lines[-1], "")
        lines.pop()
        self.assertEqual(len(lines), len(origins))
        at = {i + 1: (line, origins[i]) for i, line in enumerate(lines)}
        n = len(prelude) + 2
        self.assertEqual(at[1], ("-- luacheck: push no max line length", (generate.PRELUDE, None)))
        self.assertEqual(at[2], (prelude[0], (generate.PRELUDE, 1)))
        self.assertEqual(at[n], ("-- luacheck: pop", (generate.PRELUDE, None)))
        self.assertEqual([at[n + i] for i in range(1, 12)], [
            ("-- common", (common, 1)),
            ("local x = 1", (common, 2)),
            ("local y = 2", (common, 4)),  # begin(KEYS, ARGV) is the functions' first line
            ("", (full, None)),
            ("redis.register_function('rlock_take', function(KEYS, ARGV)", (full, None)),
            ("begin(KEYS, ARGV)", (full, None)),
            ("local z = x", (full, 1)),
            ("return z", (full, 2)),
            ("end)", (full, None)),
            ("", (light, None)),
            ("redis.register_function('rlock_beat', function(KEYS, ARGV)", (light, None)),
        ])
        self.assertEqual([at[n + i] for i in range(12, 15)], [
            ("return 8", (light, 1)),
            ("", (light, None)),
            ("end)", (light, None)),
        ])
        self.assertEqual(len(lines), n + 14)


@unittest.skipUnless(shutil.which("luacheck"), "luacheck is not installed (Debian's package lua-check)")
class Luacheck(unittest.TestCase):
    """luacheck's messages on the library name the source files and lines."""

    def test_messages_name_the_sources(self):
        with tempfile.TemporaryDirectory() as d:
            def file(name, text):
                path = os.path.join(d, name)
                with open(path, "w", encoding="utf-8") as f:
                    f.write(text)
                return path

            protocol = read(MINIMAL)
            common = file("common.lua", "-- common\nlocal NOW\nlocal function begin(keys, argv)\n"
                          "  NOW = #keys + #argv\nend\nbegin(KEYS, ARGV)\n")
            take = file("take.lua", "-- take\nlocal unused = 1\nlocal NOW = 2\nreturn NOW + undefined_name\n")
            config = os.path.join(SOURCE, "..", "..", ".luacheckrc")
            messages, clean = generate.luacheck(generate.Scripts(protocol, common, [take], []), "luacheck", config)
            self.assertFalse(clean)
            lines = [generate.relative(path) for path in (common, take)]
            self.assertIn(f"{lines[1]}:2:7: (W211) unused variable 'unused'", messages)
            self.assertIn(f"{lines[1]}:3:7: (W431) shadowing upvalue 'NOW' at {lines[0]}:2", messages)
            self.assertIn(f"{lines[1]}:4:14: (W113) accessing undefined variable 'undefined_name'", messages)
            # The prelude's tables that nobody uses.
            self.assertIn("the Lua prelude (src/lock/protocol.txt):2:7: (W211) unused variable 'CODE'", messages)

            take = file("take.lua", "return CODE.ok + AT.ok.fence + KEY.lock + EV.kind + #EVENT.acquired +\n"
                        "  #(INFO.x or WAITER.x or HOLDER.x or SEM.x or TICK.x or SUM.x or OUTCOME.x or '') + NOW\n")
            messages, clean = generate.luacheck(generate.Scripts(protocol, common, [take], []), "luacheck", config)
            self.assertEqual(messages, [])
            self.assertTrue(clean)


class CommandLine(unittest.TestCase):
    """What the build runs: an error is one line on stderr and exit status 1, and no output."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def run_main(self, *args):
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            status = generate.main(list(args))
        return status, err.getvalue()

    def test_protocol_header(self):
        protocol = os.path.join(self.dir.name, "protocol.txt")
        template = os.path.join(self.dir.name, "protocol.hpp.in")
        output = os.path.join(self.dir.name, "out", "protocol.hpp")
        with open(protocol, "w") as f:
            f.write(MINIMAL)
        with open(template, "w") as f:
            f.write("namespace x {\n@RLOCK_PROTOCOL_DEFINITIONS@}\n")
        self.assertEqual(self.run_main("protocol", protocol, template, output), (0, ""))
        with open(output) as f:
            self.assertEqual(f.read(), "namespace x {\n" + generate.cpp_definitions(read(MINIMAL)) + "}\n")

        with open(protocol, "a") as f:
            f.write("reply ok 2\n")
        os.remove(output)
        status, err = self.run_main("protocol", protocol, template, output)
        self.assertEqual((status, err), (1, f"{protocol}:{MINIMAL.count(chr(10)) + 1}: reply 'ok' is defined twice\n"))
        self.assertFalse(os.path.exists(output))

    def test_an_unknown_placeholder(self):
        protocol = os.path.join(self.dir.name, "protocol.txt")
        template = os.path.join(self.dir.name, "protocol.hpp.in")
        with open(protocol, "w") as f:
            f.write(MINIMAL)
        with open(template, "w") as f:
            f.write("\n@RLOCK_OTHER@\n")
        status, err = self.run_main("protocol", protocol, template, os.path.join(self.dir.name, "out.hpp"))
        self.assertEqual((status, err), (1, f"{template}:2: @RLOCK_OTHER@ is not something the generator makes\n"))

    def test_a_missing_file(self):
        missing = os.path.join(self.dir.name, "missing.txt")
        status, err = self.run_main("protocol", missing, missing, os.path.join(self.dir.name, "out.hpp"))
        self.assertEqual((status, err), (1, f"{missing}: No such file or directory\n"))


if __name__ == "__main__":
    unittest.main()
