"""`launch-prepare`: text files to megatron-core's indexed dataset (PREFIX.bin, PREFIX.idx).

    launch-prepare docs.jsonl notes.txt --output data/corpus --tokenizer byte
    launch-prepare --stdlib-corpus --output data/stdlib --tokenizer byte

A `.jsonl` or `.json` input is JSON lines, as Megatron-LM's tools/preprocess_data.py reads them:
one JSON object per line, the document under --json-key (default `text`). A JSON array or object
spread over many lines is refused by name (it is not JSON lines, and read as text it would be one
document of JSON syntax). Any other file is plain UTF-8 text, one document or cut by --split-on.
Each document is tokenized, ends with the tokenizer's eod (unless --no-append-eod), and is written
by megatron-core's own `IndexedDatasetBuilder`; PREFIX.json records the tokenizer and the counts.
Blank documents are left out.

Every input is read once to check it before anything is written: a bad line at the end of a large
file fails in seconds, not after the tokenizing, and before megatron-core (slow to import) loads.
No output is an input: each file the tool writes (PREFIX.bin/.idx/.json) is compared with each
input as a file, by device and inode, so another spelling, a symlink or a hard link is caught
(`corpus.json --output corpus` would write PREFIX.json over the corpus), and a clash is refused.
The temporary files are new ones (mkstemp creates them exclusively), so none is an input.
--stdlib-corpus writes PREFIX.jsonl only where there is no file, keeps the same corpus there, and
refuses any other file (a corpus.jsonl of the user's beside `--output corpus`).
The .bin and .idx are written under temporary names and renamed at the end, so PREFIX.bin/.idx are
the previous ones or the whole new ones, never half-written. Bad input prints one line naming the
file and the fix, and exits 2.
"""

import argparse
import json
import os
import re
import sys
import tempfile
import time
from typing import Iterator, List, Optional, Tuple

from launcher.files import replaced_whole, write_json_atomic, write_text_atomic
from launcher.data.tokenizer import TokenizerError, load_tokenizer

PROG = "launch-prepare"
OUTPUT_SUFFIXES = (".bin", ".idx", ".json")
CORPUS_SUFFIX = ".jsonl"
"""--stdlib-corpus writes the corpus to PREFIX.jsonl and prepares that."""
JSON_LINES_SUFFIXES = (".jsonl", ".json")
"""Inputs read as JSON lines; Megatron-LM's preprocess_data.py reads `.json` files so."""
OTHER_PREFIX = "_text_document"
"""Appended to a prefix that would write over an input: the suffix Megatron-LM's
preprocess_data.py gives its outputs (PREFIX_text_document.bin), so users know the name."""


class PrepareError(ValueError):
    """Input that cannot be prepared; the message is one line: the file, what is wrong, the fix."""


class ArgumentParser(argparse.ArgumentParser):
    """argparse whose usage errors are one line and exit 2, as every other bad input."""

    def error(self, message: str):
        print(f"error: {message}; see {PROG} --help", file=sys.stderr)
        sys.exit(2)


def parse_args(argv) -> argparse.Namespace:
    """The command line of `launch-prepare`."""
    parser = ArgumentParser(prog=PROG, description="Tokenize text files into megatron-core's "
                            "indexed dataset: PREFIX.bin, PREFIX.idx and PREFIX.json.")
    parser.add_argument("inputs", nargs="*", metavar="INPUT",
                        help=".jsonl or .json files (JSON lines: one JSON object per line, as "
                             "Megatron-LM's preprocess_data.py reads) or plain text files (cut "
                             "into documents by --split-on); never written to")
    parser.add_argument("--output", required=True, metavar="PREFIX",
                        help="output prefix: writes PREFIX.bin, PREFIX.idx and PREFIX.json; "
                             "refused where one of them is an INPUT")
    parser.add_argument("--tokenizer", required=True, metavar="NAME",
                        help="`byte`, or a Hugging Face tokenizer directory or tokenizer.json")
    parser.add_argument("--json-key", default="text", metavar="KEY",
                        help="the key holding the document in each object of a .jsonl or .json "
                             "file (default: text)")
    parser.add_argument("--split-on", default="file", type=split_rule, metavar="RULE",
                        help="how a plain text file is cut into documents: `file` (the whole "
                             "file, the default), `blank` (on blank lines, as paragraphs), or "
                             "`lines:N` (every N lines)")
    parser.add_argument("--append-eod", action=argparse.BooleanOptionalAction, default=True,
                        help="end each document with the tokenizer's eod token (default: on)")
    parser.add_argument("--stdlib-corpus", action="store_true",
                        help="instead of INPUTs, write the Python standard library's docstrings "
                             "to PREFIX.jsonl and prepare that (a PREFIX.jsonl already there is "
                             "kept if it is that corpus, refused if not)")
    args = parser.parse_args(argv)
    if args.stdlib_corpus and args.inputs:
        parser.error("give INPUT files or --stdlib-corpus, not both")
    if not args.stdlib_corpus and not args.inputs:
        parser.error("no INPUT files; give .jsonl, .json or text files, or --stdlib-corpus")
    return args


def output_paths(prefix: str) -> List[str]:
    """The files `--output prefix` writes from its inputs: checked against them before anything
    is written. (PREFIX.jsonl, which --stdlib-corpus writes, is that mode's one input:
    `write_corpus` guards it.)"""
    return [prefix + suffix for suffix in OUTPUT_SUFFIXES]


def same_file(a: str, b: str) -> bool:
    """Whether two paths name one file: by (st_dev, st_ino) where both exist, so another
    spelling, a symlink or a hard link is caught; by the resolved path otherwise."""
    try:
        return os.path.samefile(a, b)
    except OSError:  # one does not exist (yet): the same file only if the same resolved path
        return os.path.realpath(a) == os.path.realpath(b)


def overwritten_input(prefix: str, inputs: List[str]) -> Optional[Tuple[str, str]]:
    """The first (input, output) pair where an output of `prefix` is an input, else None."""
    for output in output_paths(prefix):
        for path in inputs:
            if same_file(output, path):
                return path, output
    return None


def free_prefix(prefix: str, inputs: List[str]) -> Optional[str]:
    """`prefix`, or Megatron-LM's PREFIX_text_document where `prefix` would write over an
    input; None where that would too. The prefix a refusal suggests."""
    for candidate in (prefix, prefix + OTHER_PREFIX):
        if overwritten_input(candidate, inputs) is None:
            return candidate
    return None


def check_prefix(prefix: str, inputs: List[str]) -> None:
    """PREFIX names files, not a directory, and is given without a suffix the tool adds."""
    if prefix.endswith(os.sep) or os.path.isdir(prefix):
        raise PrepareError(f"--output {prefix} is a directory; give a prefix in it, like "
                           f"{os.path.join(prefix, 'corpus')}")
    stem, suffix = os.path.splitext(prefix)
    if suffix in OUTPUT_SUFFIXES:
        other = free_prefix(stem, inputs)
        if other == stem:
            fix = f"give the prefix without {suffix} ({stem})"
        else:  # the stem is an input's name: `corpus.json --output corpus.json`
            like = f", like {other}" if other else ""
            fix = f"give a prefix without {suffix}{like} ({stem} would write over an input)"
        raise PrepareError(f"--output {prefix}: {fix}; the .bin, .idx and .json are added to it")


def check_not_inputs(prefix: str, inputs: List[str]) -> None:
    """No file the tool writes is an input: `corpus.json --output corpus` would write PREFIX.json
    over the user's corpus."""
    clash = overwritten_input(prefix, inputs)
    if clash is None:
        return
    path, output = clash
    other = free_prefix(prefix, inputs)
    like = f", like {other}" if other else ""
    raise PrepareError(f"--output {prefix} would write {output}, the same file as the input "
                       f"{path}; pick another --output{like}")


def check_output(prefix: str, inputs: List[str]) -> None:
    """Before anything is written: PREFIX is a prefix, none of its files is an input, and its
    directory takes files (the one check that writes: it may create the directory)."""
    check_prefix(prefix, inputs)
    check_not_inputs(prefix, inputs)
    make_output_folder(prefix)


def make_output_folder(prefix: str) -> None:
    """PREFIX's directory exists (created if missing) and takes a new file."""
    folder = os.path.dirname(os.path.abspath(prefix))
    try:
        os.makedirs(folder, exist_ok=True)
        tempfile.TemporaryFile(dir=folder).close()
    except OSError as err:
        reason = "a file, not a directory" if os.path.isfile(folder) else err.strerror
        raise PrepareError(f"--output {prefix}: cannot write in {folder} ({reason}); give "
                           "--output a prefix in a writable directory") from None


def check_inputs(paths: List[str]) -> None:
    """Every INPUT is a readable file."""
    for path in paths:
        if not os.path.exists(path):
            raise PrepareError(f"input {path} does not exist; check the path")
        if os.path.isdir(path):
            raise PrepareError(f"input {path} is a directory; give the files in it "
                               f"({os.path.join(path, '*.jsonl')})")
        try:
            open(path, "rb").close()
        except OSError as err:
            raise PrepareError(f"input {path} cannot be read ({err.strerror}); check its "
                               "permissions") from None


def jsonl_text(path: str, number: int, line: str, json_key: str) -> str:
    """The document on line `number` of a JSONL file."""
    where = f"input {path} line {number}"
    try:
        obj = json.loads(line.rstrip("\r\n"))  # an error's column counts on this line
    except json.JSONDecodeError as err:
        raise PrepareError(f"{where} is not JSON ({err.msg}, column {err.colno}); fix or remove "
                           "the line") from None
    if not isinstance(obj, dict):
        raise PrepareError(f"{where} is a JSON {type(obj).__name__}, not an object; give one "
                           f'object per line, like {{"{json_key}": "..."}}')
    if json_key not in obj:
        keys = ", ".join(list(obj)[:5]) or "none"
        raise PrepareError(f'{where} has no key "{json_key}" (keys: {keys}); pass --json-key '
                           "with the key that holds the document")
    text = obj[json_key]
    if not isinstance(text, str):
        raise PrepareError(f'{where}: "{json_key}" holds a JSON {type(text).__name__}, not a '
                           "string; give the document as a string")
    return text


def left_open(line: str) -> bool:
    """Whether a line starts a JSON array or object that does not end on it: the first line of
    one pretty-printed over many lines (`[` or `{`), not a line that is broken."""
    text = line.strip()
    if text[:1] not in ("[", "{"):
        return False
    try:
        json.loads(text)
    except json.JSONDecodeError as err:
        return err.pos >= len(text)  # the parser ran out of line, not into a bad character
    return False


def spread_over_lines(path: str, line: str) -> PrepareError:
    """The refusal of a JSON array or object over many lines, with the command that converts it."""
    kind, jq = ("array", "'.[]'") if line.strip()[0] == "[" else ("object", ".")
    jsonl = os.path.splitext(os.path.basename(path))[0] + ".jsonl"
    return PrepareError(f"input {path} is one JSON {kind} over many lines, not JSON lines; "
                        f"convert it to one object per line, e.g. jq -c {jq} {path} > {jsonl}")


def read_jsonl(path: str, json_key: str) -> Iterator[str]:
    """The documents of a JSON-lines file (.jsonl or .json); blank lines are skipped. A JSON
    array or object over many lines is refused at its first line."""
    with open(path, encoding="utf-8", newline="") as f:
        first = True
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            if first and left_open(line) and any(rest.strip() for rest in f):
                raise spread_over_lines(path, line)
            first = False
            yield jsonl_text(path, number, line, json_key)


def is_json_lines(path: str) -> bool:
    """Whether an input is read as JSON lines: by its suffix, as Megatron-LM reads them."""
    return path.lower().endswith(JSON_LINES_SUFFIXES)


def split_rule(text: str) -> tuple:
    """`file`, `blank` or `lines:N` as (kind, N)."""
    if text in ("file", "blank"):
        return text, 0
    match = re.fullmatch(r"lines:([1-9]\d*)", text)
    if not match:
        raise argparse.ArgumentTypeError(f"{text!r} is not file, blank or lines:N (N >= 1)")
    return "lines", int(match[1])


def read_text(path: str, rule: tuple = ("file", 0)) -> Iterator[str]:
    """A plain text file as documents, line endings kept: the whole file, its paragraphs (text
    between blank lines), or runs of N lines."""
    with open(path, encoding="utf-8", newline="") as f:
        if rule[0] == "file":
            yield f.read()
        elif rule[0] == "blank":
            yield from re.split(r"\r?\n(?:[ \t]*\r?\n)+", f.read())
        else:
            lines = f.readlines()
            for start in range(0, len(lines), rule[1]):
                yield "".join(lines[start:start + rule[1]])


def read_documents(paths: List[str], json_key: str, rule: tuple = ("file", 0)) -> Iterator[str]:
    """Every non-blank document of the inputs, in order."""
    for path in paths:
        reader = read_jsonl(path, json_key) if is_json_lines(path) else read_text(path, rule)
        try:
            for text in reader:
                if text.strip():
                    yield text
        except UnicodeDecodeError as err:
            raise PrepareError(f"input {path} is not UTF-8 text (byte {err.start}: {err.reason}); "
                               "convert it to UTF-8, e.g. with iconv -t UTF-8") from None
        except OSError as err:
            raise PrepareError(f"input {path} cannot be read ({err.strerror}); check the "
                               "file") from None


def count_documents(paths: List[str], json_key: str, rule: tuple = ("file", 0)) -> int:
    """The number of documents, reading (and so checking) every input; none is an error."""
    count = sum(1 for _ in read_documents(paths, json_key, rule))
    if count == 0:
        shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
        raise PrepareError(f"no documents in {shown}: every input is empty or blank; give files "
                           "that hold text")
    return count


class Progress:
    """Documents and tokens on stderr while writing: tqdm's bar if installed, else a counter line.
    Shown only on a terminal, so logs and pipes get the final line alone."""

    def __init__(self, total: int) -> None:
        self.total, self.documents, self.tokens = total, 0, 0
        self.shown = sys.stderr.isatty()
        self._last = 0.0
        self.closed = False
        try:
            from tqdm import tqdm
        except ImportError:
            self._bar = None
        else:
            self._bar = tqdm(total=total, unit="doc", file=sys.stderr, disable=not self.shown,
                             dynamic_ncols=True, desc="prepare")

    def update(self, tokens: int) -> None:
        """One more document of `tokens` tokens."""
        self.documents += 1
        self.tokens += tokens
        if self._bar is not None:
            self._bar.update(1)
            self._bar.set_postfix_str(f"{self.tokens:,} tokens", refresh=False)
        elif self.shown and time.monotonic() - self._last > 0.2:
            self._last = time.monotonic()
            print(f"\r{self.counter()}", end="", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Ends the bar or the counter line; a second call does nothing."""
        if self.closed:
            return
        self.closed = True
        if self._bar is not None:
            self._bar.set_postfix_str(f"{self.tokens:,} tokens", refresh=False)
            self._bar.close()
        elif self.shown:
            print(f"\r{self.counter()}", file=sys.stderr, flush=True)

    def counter(self) -> str:
        """The counter line shown without tqdm."""
        return f"[prepare] {self.documents:,}/{self.total:,} documents, {self.tokens:,} tokens"


def import_writer():
    """megatron-core's DType and IndexedDatasetBuilder, its import-time notices (Transformer
    Engine/Apex missing, no CUDA runtime) filtered as the ranks filter them."""
    from launcher import notices

    notices.install()
    from megatron.core.datasets.indexed_dataset import DType, IndexedDatasetBuilder

    return DType, IndexedDatasetBuilder


def token_dtype(dtype_enum, vocab_size: int):
    """The narrowest numpy dtype megatron-core picks for ids below `vocab_size`."""
    import numpy

    optimal = getattr(dtype_enum, "optimal_dtype", None)
    return optimal(vocab_size) if optimal is not None else numpy.int32


def write_documents(builder, documents: Iterator[str], tokenizer, append_eod: bool, dtype,
                    progress: Progress) -> Tuple[int, int]:
    """Tokenizes and adds each document; returns (documents, tokens) written."""
    import numpy

    num_documents = num_tokens = 0
    for text in documents:
        ids = tokenizer.tokenize(text)
        if append_eod:
            ids.append(tokenizer.eod)
        if not ids:  # a document no token stands for: megatron cannot sample from it
            continue
        builder.add_document(numpy.asarray(ids, dtype=dtype), [len(ids)])
        num_documents += 1
        num_tokens += len(ids)
        progress.update(len(ids))
    return num_documents, num_tokens


def write_dataset(prefix: str, paths: List[str], json_key: str, tokenizer, append_eod: bool,
                  total: int, rule: tuple = ("file", 0)) -> Tuple[int, int]:
    """Writes PREFIX.bin and PREFIX.idx with megatron-core's builder, under temporary names
    renamed at the end (launcher.files.replaced_whole); returns (documents, tokens)."""
    dtype_enum, builder_class = import_writer()
    dtype = token_dtype(dtype_enum, tokenizer.vocab_size)
    progress = Progress(total)
    try:
        with replaced_whole(prefix + ".bin", prefix + ".idx") as (tmp_bin, tmp_idx):
            builder = builder_class(tmp_bin, dtype=dtype)
            try:
                counts = write_documents(builder, read_documents(paths, json_key, rule),
                                         tokenizer, append_eod, dtype, progress)
                if counts[0] == 0:
                    raise PrepareError(f"no document of {', '.join(paths[:3])} has a token; use "
                                       "--append-eod or another tokenizer")
                builder.finalize(tmp_idx)
            finally:
                builder.data_file.close()  # finalize closed it; on an error it is still open
        return counts
    finally:
        progress.close()


def prepare(paths: List[str], prefix: str, tokenizer, json_key: str = "text",
            append_eod: bool = True, rule: tuple = ("file", 0)) -> dict:
    """Checks the inputs and the output, writes PREFIX.bin/.idx/.json with `tokenizer` (from
    `load_tokenizer`); returns the metadata. Bad input raises PrepareError (one line) before
    anything is written."""
    check_inputs(paths)
    check_output(prefix, paths)
    total = count_documents(paths, json_key, rule)
    num_documents, num_tokens = write_dataset(prefix, paths, json_key, tokenizer, append_eod,
                                              total, rule)
    metadata = {"tokenizer": tokenizer.name, "vocab_size": tokenizer.vocab_size,
                "eod": tokenizer.eod, "pad": tokenizer.pad, "documents": num_documents,
                "tokens": num_tokens, "append_eod": append_eod}
    write_json_atomic(prefix + ".json", metadata)
    return metadata


def check_corpus_file(prefix: str, path: str, data: bytes) -> None:
    """A PREFIX.jsonl already there is this corpus (the same bytes: kept) or the user's own file,
    which --stdlib-corpus must not write over: `--output corpus` beside a corpus.jsonl."""
    try:
        if os.path.getsize(path) == len(data):  # a large corpus of the user's is not read
            with open(path, "rb") as f:
                if f.read() == data:
                    return
    except OSError:  # unreadable: not a corpus this tool can vouch for
        pass
    raise PrepareError(f"--output {prefix}: {path} exists and is not the standard-library "
                       "corpus this Python makes, which --stdlib-corpus writes there; pick another "
                       f"--output, or move {path} away")


def write_corpus(prefix: str) -> str:
    """The standard-library docstring corpus as PREFIX.jsonl, the input of the prepare that
    follows; returns its path. Checked as that input before it is written; a file already there
    is kept if it holds this corpus and refused if not (it is the user's)."""
    from launcher.data.corpus import stdlib_corpus

    path = prefix + CORPUS_SUFFIX
    check_prefix(prefix, [])
    check_not_inputs(prefix, [path])
    text, count = stdlib_corpus()
    if os.path.exists(path):
        check_corpus_file(prefix, path, text.encode())
    else:
        make_output_folder(prefix)
        write_text_atomic(path, text)
    print(f"[prepare] {count} standard-library docstrings -> {path}")
    return path


def main(argv=None) -> None:
    """`launch-prepare INPUT... --output PREFIX --tokenizer NAME`; exit code 2 on bad input."""
    args = parse_args(argv)
    try:
        tokenizer = load_tokenizer(args.tokenizer)  # a wrong NAME fails before a corpus is written
        inputs = [write_corpus(args.output)] if args.stdlib_corpus else args.inputs
        meta = prepare(inputs, args.output, tokenizer, args.json_key, args.append_eod,
                       args.split_on)
    except (PrepareError, TokenizerError) as err:
        print(f"error: {err}", file=sys.stderr)
        sys.exit(2)
    except OSError as err:  # the disk, not the input: full, or gone while writing
        print(f"error: writing {args.output}.bin/.idx failed ({err}); free space or give --output "
              "another directory", file=sys.stderr)
        sys.exit(1)
    docs = meta['documents']
    print(f"[prepare] {docs} document{'s' if docs != 1 else ''}, {meta['tokens']} tokens -> "
          f"{args.output}.bin/.idx (tokenizer {meta['tokenizer']}, vocab {meta['vocab_size']})")


if __name__ == "__main__":
    main()
