#!/usr/bin/env python3
"""The docs check (CI): every relative link in README.md and docs/ resolves, and every
command of the getting-started pages runs.

Links: each Markdown link or image `[text](target)` and reference `[name]: target` outside
code, whose target is not a URL, must name a file or directory of the repository; a
`#fragment` on a Markdown file (or alone, on the page itself) must be one of its headings'
anchors, as GitHub makes them.

Commands: each fenced `sh` block of the pages in COMMAND_PAGES runs, command by command,
from the repository root. A block whose first line is a comment starting with `# needs`
(`# needs a fleet: ...`, `# needs the engine: ...`) is not run: it is reported as skipped.
`laneway` is the binary in $LANEWAY_BIN (default target/debug/laneway; build it first), and
`cargo run --release [--]` stands for it. A command ending in `&` is a server: it is started
in the background and the next command waits for its `listening on` line; every server
started is stopped at the end. A command that fails, or takes longer than
COMMAND_TIMEOUT_S, fails the check.

    python3 scripts/check_docs.py             # links and commands
    python3 scripts/check_docs.py --links     # links only (no binary needed)
"""

import argparse
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
COMMAND_PAGES = ["docs/getting-started.md", "docs/real-engine.md"]
COMMAND_TIMEOUT_S = 120
READY_TIMEOUT_S = 120
READY_LINE = "listening on"

FENCE = re.compile(r"^(\s*)(```+|~~~+)\s*([^`\s]*)")
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE = re.compile(r"^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
INLINE_CODE = re.compile(r"(`+)(?:.*?)\1")
HEADING = re.compile(r"^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
URL = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def markdown_files():
    files = [ROOT / "README.md"]
    files += sorted((ROOT / "docs").rglob("*.md"))
    return [path for path in files if path.exists()]


def outside_fences(text):
    """(line number, line) of the lines outside fenced code blocks."""
    fence = None
    for number, line in enumerate(text.splitlines(), 1):
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(2)
            continue
        if fence is not None:
            stripped = line.strip()
            if stripped.startswith(fence[0] * len(fence)) and not stripped.strip(fence[0]):
                fence = None
            continue
        yield number, line


def prose_lines(text):
    """Lines outside code blocks, inline code blanked out (a link in code is no link)."""
    for number, line in outside_fences(text):
        yield number, INLINE_CODE.sub(lambda m: " " * len(m.group(0)), line)


def slug(heading):
    """GitHub's anchor for a heading: markup dropped, lower case, punctuation removed,
    spaces to hyphens."""
    text = re.sub(r"!\[[^\]]*\]\([^)]*\)", "", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = text.replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    """The anchors of a page's headings (a repeated heading gets `-1`, `-2`, ...)."""
    if path not in cache:
        found, counts = set(), {}
        for _, line in outside_fences(path.read_text(encoding="utf-8")):
            heading = HEADING.match(line)
            if heading:
                base = slug(heading.group(2))
                count = counts.get(base, 0)
                counts[base] = count + 1
                found.add(base if count == 0 else f"{base}-{count}")
        cache[path] = found
    return cache[path]


def check_links():
    problems, checked = [], 0
    for page in markdown_files():
        text = page.read_text(encoding="utf-8")
        for number, line in prose_lines(text):
            targets = [m.group(1) for m in LINK.finditer(line)]
            reference = REFERENCE.match(line)
            if reference:
                targets.append(reference.group(1))
            for target in targets:
                if URL.match(target) or target.startswith("//"):
                    continue
                checked += 1
                where = f"{page.relative_to(ROOT)}:{number}"
                file_part, _, fragment = target.partition("#")
                resolved = page if not file_part else (page.parent / file_part).resolve()
                if file_part and not resolved.exists():
                    problems.append(f"{where}: {target}: no such file")
                    continue
                if ROOT not in resolved.parents and resolved != ROOT:
                    problems.append(f"{where}: {target}: outside the repository")
                    continue
                if fragment and resolved.suffix == ".md" and fragment not in anchors(resolved):
                    problems.append(f"{where}: {target}: no heading makes #{fragment}")
    return checked, problems


def sh_blocks(page):
    """(line number, lines) of every fenced `sh` block."""
    blocks, current, start, fence = [], None, 0, None
    for number, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1):
        match = FENCE.match(line)
        if fence is None and match:
            fence = match.group(2)
            if match.group(3) in ("sh", "bash", "shell", "console"):
                current, start = [], number
            continue
        if fence is not None and line.strip().startswith(fence[0] * len(fence)) \
                and not line.strip().strip(fence[0]):
            if current is not None:
                blocks.append((start, current))
            current, fence = None, None
            continue
        if current is not None:
            current.append(line)
    return blocks


def commands(lines):
    """Shell commands of a block: continuation lines joined, comments and blanks dropped,
    a here-document kept with its command."""
    found, pending, heredoc = [], "", None
    for line in lines:
        if heredoc is not None:
            pending += "\n" + line
            if line.strip() == heredoc:
                found.append(pending)
                pending, heredoc = "", None
            continue
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        pending = f"{pending}\n{line}" if pending else line
        if stripped.endswith("\\"):
            continue
        marker = re.search(r"<<-?\s*['\"]?(\w+)['\"]?", line)
        if marker:
            heredoc = marker.group(1)
            continue
        found.append(pending)
        pending = ""
    if pending:
        found.append(pending)
    return found


def without_comment(command):
    """The command without a trailing `# ...` comment (outside quotes)."""
    quote = None
    for index, char in enumerate(command):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or command[index - 1] in " \t"):
            return command[:index].rstrip()
    return command.rstrip()


def as_run(command):
    """`cargo run --release [--] ARGS` is the binary under test."""
    return re.sub(r"\bcargo run --release(?: --)?(?=\s|$)", "laneway", command)


class Runner:
    def __init__(self, binary):
        self.servers = []
        self.shims = tempfile.TemporaryDirectory(prefix="laneway-docs-")
        shim = Path(self.shims.name) / "laneway"
        shim.write_text(f'#!/bin/sh\nexec "{binary}" "$@"\n')
        shim.chmod(0o755)
        self.env = dict(os.environ, PATH=f"{self.shims.name}:{os.environ.get('PATH', '')}")

    def run(self, command):
        text = as_run(without_comment(command))
        if text.endswith("&") and not text.endswith("&&"):
            return self.start(text[:-1].rstrip())
        try:
            done = subprocess.run(
                ["bash", "-o", "pipefail", "-c", text], cwd=ROOT, env=self.env,
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=COMMAND_TIMEOUT_S,
            )
        except subprocess.TimeoutExpired:
            return f"did not finish within {COMMAND_TIMEOUT_S} s"
        if done.returncode != 0:
            tail = done.stdout.decode(errors="replace").strip().splitlines()[-15:]
            return f"exit status {done.returncode}\n      " + "\n      ".join(tail)
        return None

    def start(self, text):
        log = tempfile.NamedTemporaryFile(prefix="laneway-docs-server-", suffix=".log", delete=False)
        process = subprocess.Popen(
            ["bash", "-c", text], cwd=ROOT, env=self.env, stdout=log,
            stderr=subprocess.STDOUT, start_new_session=True,
        )
        self.servers.append(process)
        deadline = time.monotonic() + READY_TIMEOUT_S
        while time.monotonic() < deadline:
            output = Path(log.name).read_text(errors="replace")
            if READY_LINE in output:
                return None
            if process.poll() is not None:
                tail = "\n      ".join(output.strip().splitlines()[-15:])
                return f"the server exited ({process.returncode}) before `{READY_LINE}`\n      {tail}"
            time.sleep(0.2)
        return f"no `{READY_LINE}` within {READY_TIMEOUT_S} s"

    def stop(self):
        for process in self.servers:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.servers:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        self.shims.cleanup()


def check_commands(binary):
    problems, ran, skipped = [], 0, 0
    runner = Runner(binary)
    try:
        for name in COMMAND_PAGES:
            page = ROOT / name
            for start, lines in sh_blocks(page):
                first = next((line.strip() for line in lines if line.strip()), "")
                if re.match(r"#\s*needs\b", first, re.IGNORECASE):
                    skipped += 1
                    print(f"  skipped {name}:{start}: {first.lstrip('# ')}")
                    continue
                for command in commands(lines):
                    ran += 1
                    shown = " ".join(command.split())[:100]
                    problem = runner.run(command)
                    print(f"  {'FAIL' if problem else 'ok  '} {name}:{start}: {shown}")
                    if problem:
                        problems.append(f"{name}:{start}: `{shown}`: {problem}")
    finally:
        runner.stop()
    return ran, skipped, problems


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--links", action="store_true", help="check the links only")
    args = parser.parse_args()
    failed = False
    checked, problems = check_links()
    print(f"links: {checked} relative links in README.md and docs/, {len(problems)} broken")
    for problem in problems:
        print(f"  {problem}")
    failed |= bool(problems)
    if not args.links:
        binary = Path(os.environ.get("LANEWAY_BIN", ROOT / "target/debug/laneway")).resolve()
        if not binary.is_file():
            print(f"commands: no binary at {binary}: `cargo build` first, or set LANEWAY_BIN")
            return 1
        print(f"commands of {', '.join(COMMAND_PAGES)} (laneway = {binary}):")
        ran, skipped, problems = check_commands(binary)
        print(f"commands: {ran} run, {len(problems)} failed; {skipped} blocks marked as needing a fleet or engine")
        for problem in problems:
            print(f"  {problem}")
        failed |= bool(problems)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
