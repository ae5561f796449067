# SPDX-License-Identifier: Apache-2.0
"""The README's and docs/*.md's examples, run against the built binary (issue 41): a doc whose
example drifts from what lastcall does fails here.

Each fenced block opts in or out in its info string (GitHub reads only the first word, the
language, so the rest stays out of the rendered page):

- a block in a shell language (sh, shell, bash, console) says `test` or `no-test`; one that says
  neither fails the test, so that a new example is never untested by omission;
- `sh test`: a script, run with `sh -e`; it passes when every command succeeds;
- `console test`: a transcript: `$ COMMAND` lines (a line ending in `\\` goes on), each followed
  by the output it prints (stdout and stderr as a terminal shows them). `...` in an expected line
  matches any text, and a line of `...` alone any number of lines; an exit status is shown with
  `$ echo $?`. The commands of a block run in one shell, in order;
- `file=NAME` in any block's info string writes the block to NAME first (```toml file=x.toml).

Each document runs in a scratch directory of its own: `lastcall` on PATH is the binary under
test, `tests/` is the repository's (its data files), TZ=UTC, NO_COLOR=1, and XDG_RUNTIME_DIR,
XDG_STATE_HOME and HOME are inside it, so `lastcall status` and `lastcall runs` see only what the
document started. Blocks run in the order of the document.
"""
import difflib
import glob
import os
import re
import shutil
import subprocess
import tempfile
import unittest

from lctest import LASTCALL

REPO = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
DOCUMENTS = ["README.md"] + sorted(
    os.path.relpath(p, REPO) for p in glob.glob(os.path.join(REPO, "docs", "*.md")))
SHELLS = {"sh", "shell", "bash", "console"}
BLOCK_TIMEOUT = 20
MARK = "@@lastcall-docs-example-{}@@"


class Block:
    def __init__(self, doc, line, info, body):
        self.doc, self.line, self.body = doc, line, body
        words = info.split()
        self.language = words[0] if words else ""
        self.words = set(words[1:])
        self.file = next((w[len("file="):] for w in words[1:] if w.startswith("file=")), None)

    def where(self):
        return f"{self.doc}:{self.line}"


def blocks_of(doc):
    """The fenced blocks of a Markdown file, with the line of their opening fence."""
    with open(os.path.join(REPO, doc)) as f:
        lines = f.read().split("\n")
    out, i = [], 0
    while i < len(lines):
        m = re.match(r"^(\s*)(```+|~~~+)(.*)$", lines[i])
        if not m:
            i += 1
            continue
        indent, fence, info = len(m.group(1)), m.group(2), m.group(3).strip()
        j = i + 1
        while j < len(lines) and not re.match(r"^\s*" + re.escape(fence) + r"\s*$", lines[j]):
            j += 1
        body = [line[indent:] if line[:indent].isspace() else line for line in lines[i + 1:j]]
        out.append(Block(doc, i + 1, info, body))
        i = j + 1
    return out


def transcript(block):
    """[(command, expected output lines)] of a console block."""
    steps = []
    lines = iter(block.body)
    for line in lines:
        if line.startswith("$ "):
            command = line[2:]
            while command.endswith("\\"):
                command = command[:-1] + "\n" + next(lines, "")
            steps.append((command, []))
        elif steps:
            steps[-1][1].append(line)
        elif line.strip():
            raise AssertionError(f"{block.where()}: output before the first `$ ` command: {line!r}")
    for _, expected in steps:
        while expected and not expected[-1].strip():
            expected.pop()
    return steps


def matches(expected, got):
    """Whether the output lines match the expected ones (`...` as described at the top)."""
    if not expected:
        return not got
    head = expected[0]
    if head.strip() == "...":
        return any(matches(expected[1:], got[k:]) for k in range(len(got) + 1))
    if not got:
        return False
    pattern = ".*".join(re.escape(part) for part in head.rstrip().split("..."))
    return re.fullmatch(pattern, got[0].rstrip()) is not None and matches(expected[1:], got[1:])


class DocsExamplesTest(unittest.TestCase):
    def scratch(self):
        d = tempfile.mkdtemp(prefix="docs-")
        bindir = os.path.join(d, ".bin")
        os.mkdir(bindir)
        os.symlink(os.path.realpath(LASTCALL), os.path.join(bindir, "lastcall"))
        os.symlink(os.path.join(REPO, "tests"), os.path.join(d, "tests"))
        runtime = os.path.join(d, ".runtime")
        os.mkdir(runtime, 0o700)
        env = dict(os.environ, PATH=bindir + os.pathsep + os.environ.get("PATH", ""), TZ="UTC",
                   NO_COLOR="1", XDG_RUNTIME_DIR=runtime, HOME=d,
                   XDG_STATE_HOME=os.path.join(d, ".state"))
        self.addCleanup(shutil.rmtree, d, True)
        return d, env

    def run_script(self, block, script, cwd, env, flags=()):
        try:
            return subprocess.run(["/bin/sh", *flags, "-c", script], cwd=cwd, env=env,
                                  stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, timeout=BLOCK_TIMEOUT, text=True)
        except subprocess.TimeoutExpired:
            self.fail(f"{block.where()}: still running after {BLOCK_TIMEOUT}s")

    def run_console(self, block, cwd, env):
        steps = transcript(block)
        self.assertTrue(steps, f"{block.where()}: a console block without a `$ ` command")
        script = "exec 2>&1\n"
        for k, (command, _) in enumerate(steps):
            # The status is kept across the mark, for a `$ echo $?` that follows.
            script += (f"{command}\n__status=$?; printf '\\n%s\\n' '{MARK.format(k)}'; "
                       "(exit $__status)\n")
        r = self.run_script(block, script, cwd, env)
        outputs = re.split(r"\n@@lastcall-docs-example-\d+@@\n", r.stdout)
        for k, (command, expected) in enumerate(steps):
            got = outputs[k].split("\n") if k < len(outputs) and outputs[k] else []
            while got and not got[-1].strip():
                got.pop()
            if not matches(expected, got):
                diff = difflib.unified_diff(expected, got, "the document", "printed", lineterm="")
                self.fail(f"{block.where()}: `{command}` printed other lines than the document "
                          "says (`...` lines of the document match anything):\n" + "\n".join(diff))

    def run_document(self, doc):
        cwd, env = self.scratch()
        for block in blocks_of(doc):
            if block.file:
                with open(os.path.join(cwd, block.file), "w") as f:
                    f.write("\n".join(block.body) + "\n")
            if block.language not in SHELLS:
                continue
            marked = {"test", "no-test"} & block.words
            self.assertEqual(len(marked), 1,
                             f"{block.where()}: a ```{block.language} block says "
                             "`test` (run it) or `no-test` (it cannot run here) in its info string")
            if "no-test" in marked:
                continue
            with self.subTest(block=block.where()):
                if block.language == "console":
                    self.run_console(block, cwd, env)
                else:
                    r = self.run_script(block, "\n".join(block.body), cwd, env, ["-e"])
                    self.assertEqual(r.returncode, 0, f"{block.where()}:\n{r.stdout}")


def _add_tests():
    for doc in DOCUMENTS:
        name = "test_examples_of_" + re.sub(r"\W", "_", doc)
        setattr(DocsExamplesTest, name, lambda self, doc=doc: self.run_document(doc))


_add_tests()


class TranscriptMatchingTest(unittest.TestCase):
    """The matcher itself: a transcript that says too much or too little fails."""

    def test_dots_match_any_text_in_a_line_and_any_lines_alone(self):
        self.assertTrue(matches(["a ... c"], ["a b c"]))
        self.assertTrue(matches(["x", "...", "z"], ["x", "y1", "y2", "z"]))
        self.assertTrue(matches(["x", "...", "z"], ["x", "z"]))
        self.assertFalse(matches(["a ... c"], ["a b d"]))
        self.assertFalse(matches(["x"], ["x", "more"]))
        self.assertFalse(matches(["x", "y"], ["x"]))


if __name__ == "__main__":
    unittest.main()
