"""`launch-prepare`: text to megatron-core's indexed dataset and back, read with megatron-core's own
reader; the byte and Hugging Face tokenizers; bad input in one line, exit 2; the stdlib corpus."""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from launcher.data.corpus import write_stdlib_corpus
from launcher.data.prepare import main, prepare
from launcher.data.tokenizer import ByteTokenizer, TokenizerError, load_tokenizer

SCRIPT = Path(sys.executable).parent / "launch-prepare"
PREPARE = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "launcher.data.prepare"]

TEXTS = {
    "a.txt": "First file.\n\nIts second paragraph stays in the same document.\n",
    "b.txt": "Zweite Datei: Grüße, naïve café, ½ € — and a tab\there.",
}
JSONL_TEXTS = ["日本語のテキスト and emoji 🙂", "plain ascii line\nwith a newline inside"]


def read_dataset(prefix):
    """Every document's tokens, through megatron-core's IndexedDataset."""
    from megatron.core.datasets.indexed_dataset import IndexedDataset

    dataset = IndexedDataset(str(prefix))
    assert list(dataset.document_indices) == list(range(len(dataset) + 1))  # one sequence each
    return [dataset[i].tolist() for i in range(len(dataset))]


def write_inputs(folder):
    """Two text files and a JSONL file (with a blank line); returns (paths, documents in order)."""
    for name, text in TEXTS.items():
        (folder / name).write_text(text, encoding="utf-8")
    lines = [json.dumps({"text": JSONL_TEXTS[0], "id": 1}), "",
             json.dumps({"text": JSONL_TEXTS[1]}, ensure_ascii=False)]
    (folder / "c.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    paths = [str(folder / name) for name in (*TEXTS, "c.jsonl")]
    return paths, [*TEXTS.values(), *JSONL_TEXTS]


def check_round_trip(prefix, tokenizer, documents):
    """Each document is its text's tokens followed by one eod, and nothing else."""
    stored = read_dataset(prefix)
    assert len(stored) == len(documents)
    for ids, text in zip(stored, documents):
        assert ids[-1] == tokenizer.eod and tokenizer.eod not in ids[:-1]
        assert ids[:-1] == tokenizer.tokenize(text)
        assert tokenizer.detokenize(ids[:-1]) == text


def test_prepare_round_trips_text_and_jsonl(tmp_path, capsys):
    paths, documents = write_inputs(tmp_path)
    prefix = tmp_path / "out" / "corpus"
    main([*paths, "--output", str(prefix), "--tokenizer", "byte"])
    check_round_trip(prefix, ByteTokenizer(), documents)
    tokens = sum(len(text.encode()) + 1 for text in documents)
    meta = json.loads((tmp_path / "out" / "corpus.json").read_text())
    assert meta == {"tokenizer": "byte", "vocab_size": 258, "eod": 256, "pad": 257, "documents": 4,
                    "tokens": tokens, "append_eod": True}
    assert capsys.readouterr().out.strip().endswith(
        f"4 documents, {tokens} tokens -> {prefix}.bin/.idx (tokenizer byte, vocab 258)")
    assert sorted(os.listdir(tmp_path / "out")) == ["corpus.bin", "corpus.idx", "corpus.json"]


def test_no_append_eod_writes_the_text_tokens_alone(tmp_path):
    paths, documents = write_inputs(tmp_path)
    main([*paths, "--output", str(tmp_path / "d"), "--tokenizer", "byte", "--no-append-eod"])
    assert read_dataset(tmp_path / "d") == [list(text.encode()) for text in documents]


def test_byte_tokenizer_ids():
    tok = load_tokenizer("byte")
    assert (tok.name, tok.vocab_size, tok.eod, tok.pad) == ("byte", 258, 256, 257)
    assert tok.tokenize("Aé") == [65, 0xC3, 0xA9]
    assert tok.detokenize([65, 0xC3, 0xA9, 256, 257]) == "Aé"
    assert tok.detokenize([65, 0xC3]) == "A\ufffd"  # a cut multi-byte character
    with pytest.raises(TokenizerError, match="token id 300"):
        tok.detokenize([300])


def test_unknown_tokenizer_names_the_value_and_the_fix(tmp_path):
    with pytest.raises(TokenizerError, match=r"tokenizer gpt9: not `byte` and no tokenizer.json "
                                             r"at gpt9; use --tokenizer byte"):
        load_tokenizer("gpt9")
    with pytest.raises(TokenizerError, match="no tokenizer.json at"):
        load_tokenizer(str(tmp_path))  # a directory without tokenizer.json


def train_tokenizer(folder, special_tokens):
    """A tiny byte-level BPE (it round-trips any text) saved as folder/tokenizer.json."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=special_tokens,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([*TEXTS.values(), *JSONL_TEXTS] * 5, trainer)
    folder.mkdir()
    tok.save(str(folder / "tokenizer.json"))
    return folder


@pytest.fixture
def hf_dir(tmp_path):
    pytest.importorskip("tokenizers")
    return train_tokenizer(tmp_path / "tok", ["<|endoftext|>", "<pad>"])


def test_hugging_face_tokenizer_loads_from_a_directory_or_its_file(hf_dir):
    from tokenizers import Tokenizer

    raw = Tokenizer.from_file(str(hf_dir / "tokenizer.json"))
    for name in (str(hf_dir), str(hf_dir / "tokenizer.json")):
        tok = load_tokenizer(name)
        assert tok.name == name and tok.vocab_size == raw.get_vocab_size()
        assert (tok.eod, tok.pad) == (raw.token_to_id("<|endoftext|>"), raw.token_to_id("<pad>"))
        for text in [*TEXTS.values(), *JSONL_TEXTS]:
            assert tok.detokenize(tok.tokenize(text)) == text


def test_prepare_with_a_hugging_face_tokenizer(tmp_path, hf_dir):
    paths, documents = write_inputs(tmp_path)
    main([*paths, "--output", str(tmp_path / "hf"), "--tokenizer", str(hf_dir)])
    tok = load_tokenizer(str(hf_dir))
    check_round_trip(tmp_path / "hf", tok, documents)
    meta = json.loads((tmp_path / "hf.json").read_text())
    assert (meta["tokenizer"], meta["vocab_size"], meta["eod"], meta["pad"]) == (
        str(hf_dir), tok.vocab_size, tok.eod, tok.pad)


def test_hugging_face_tokenizer_without_an_eod_token_is_refused(tmp_path):
    pytest.importorskip("tokenizers")
    folder = train_tokenizer(tmp_path / "noeod", ["<unk>"])
    with pytest.raises(TokenizerError, match=r"none of <\|endoftext\|>, </s>, <eos>, \[SEP\]"):
        load_tokenizer(str(folder))
    pad_is_eod = train_tokenizer(tmp_path / "sep", ["[SEP]"])
    tok = load_tokenizer(str(pad_is_eod))
    assert tok.pad == tok.eod


class FailingTokenizer(ByteTokenizer):
    """The byte tokenizer, failing at its second document: an interrupted write."""

    def __init__(self):
        self.calls = 0

    def tokenize(self, text):
        self.calls += 1
        if self.calls == 2:
            raise KeyboardInterrupt
        return super().tokenize(text)


def test_an_interrupted_write_keeps_the_previous_dataset(tmp_path):
    paths, documents = write_inputs(tmp_path)
    prefix = tmp_path / "keep"
    main([paths[0], "--output", str(prefix), "--tokenizer", "byte"])
    before = {p.name: p.read_bytes() for p in tmp_path.glob("keep*")}
    with pytest.raises(KeyboardInterrupt):
        prepare(paths, str(prefix), FailingTokenizer())
    assert {p.name: p.read_bytes() for p in tmp_path.glob("keep*")} == before
    assert not list(tmp_path.glob(".keep*"))  # no temporary file left behind
    assert len(read_dataset(prefix)) == 1


def spread(folder, *lines):
    """A .json file holding one JSON value pretty-printed over `lines`: not JSON lines."""
    (folder / "spread.json").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return "spread.json"


def bad_jsonl(folder, lines):
    path = folder / "bad.jsonl"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return "bad.jsonl"


BAD_INPUT = [
    (lambda d: ["missing.txt"], r"input missing.txt does not exist; check the path"),
    (lambda d: [bad_jsonl(d, ['{"text": "ok"}', '{"text": '])],
     r"input bad.jsonl line 2 is not JSON \(.*\); fix or remove the line"),
    (lambda d: [bad_jsonl(d, ['{"text": "ok"}', "", '{"body": "no text key"}'])],
     r'input bad.jsonl line 3 has no key "text" \(keys: body\); pass --json-key'),
    (lambda d: [bad_jsonl(d, ['["a list"]'])], r"bad.jsonl line 1 is a JSON list, not an object"),
    (lambda d: [bad_jsonl(d, ['{"text": 3}'])], r'bad.jsonl line 1: "text" holds a JSON int'),
    (lambda d: [bad_jsonl(d, ["", "  "]), "empty.txt"],
     r"no documents in bad.jsonl, empty.txt: every input is empty or blank"),
    (lambda d: ["latin1.txt"], r"input latin1.txt is not UTF-8 text .*; convert it to UTF-8"),
    (lambda d: ["empty.txt", "--output", "empty.txt/sub/x"],
     r"--output empty.txt/sub/x: cannot write in .*empty.txt/sub \(.*\); give --output a prefix "
     r"in a writable directory"),
    (lambda d: ["empty.txt", "--output", "out.bin"], r"--output out.bin: give the prefix without "
                                                     r"\.bin \(out\)"),
    (lambda d: ["empty.txt", "--tokenizer", "gpt9"], r"tokenizer gpt9: not `byte`"),
    (lambda d: [], r"no INPUT files; give .jsonl, .json or text files, or --stdlib-corpus"),
    (lambda d: [spread(d, "[", '  {"text": "a"},', '  {"text": "b"}', "]")],
     r"^error: input spread.json is one JSON array over many lines, not JSON lines; convert it to "
     r"one object per line, e.g. jq -c '\.\[\]' spread.json > spread.jsonl$"),
    (lambda d: [spread(d, "{", '  "text": "a"', "}")],
     r"^error: input spread.json is one JSON object over many lines, not JSON lines; convert it "
     r"to one object per line, e.g. jq -c \. spread.json > spread.jsonl$"),
]


@pytest.mark.parametrize("make_args, message", BAD_INPUT, ids=[
    "missing_file", "not_json", "no_key", "not_object", "not_string", "no_documents", "not_utf8",
    "unwritable_output", "output_with_suffix", "unknown_tokenizer", "no_inputs",
    "json_array_over_lines", "json_object_over_lines"])
def test_bad_input_is_one_line_and_exit_2(tmp_path, make_args, message):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "latin1.txt").write_bytes("café".encode("latin-1"))
    args = make_args(tmp_path)
    defaults = [] if "--output" in args else ["--output", "out"]
    defaults += [] if "--tokenizer" in args else ["--tokenizer", "byte"]
    proc = subprocess.run([*PREPARE, *args, *defaults], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    assert re.search(message, lines[0]), lines[0]
    assert not list(tmp_path.glob("out*")) and not list(tmp_path.glob(".out*"))


def test_stdlib_corpus_is_deterministic_and_prepares(tmp_path, capsys):
    count = write_stdlib_corpus(str(tmp_path / "first.jsonl"))
    first = (tmp_path / "first.jsonl").read_bytes()
    docs = [json.loads(line)["text"] for line in first.decode().splitlines()]
    assert count == len(docs) >= 500 and sum(len(d.encode()) for d in docs) >= 1_000_000
    assert min(len(d) for d in docs) >= 200 and len(set(docs)) == len(docs)
    main(["--stdlib-corpus", "--output", str(tmp_path / "std"), "--tokenizer", "byte"])
    assert (tmp_path / "std.jsonl").read_bytes() == first  # built again, the same bytes
    stored = read_dataset(tmp_path / "std")
    assert len(stored) == count
    assert bytes(stored[-1][:-1]).decode() == docs[-1]
    assert f"{count} documents" in capsys.readouterr().out


@pytest.mark.parametrize("rule,expected", [
    ("file", ["one\ntwo\n\nthree\n\n \nfour\nfive\n"]),
    ("blank", ["one\ntwo", "three", "four\nfive\n"]),
    ("lines:2", ["one\ntwo\n", "\nthree\n", "\n \n", "four\nfive\n"]),
])
def test_split_on_cuts_a_text_file_into_documents(tmp_path, capsys, rule, expected):
    text = tmp_path / "notes.txt"
    text.write_text("one\ntwo\n\nthree\n\n \nfour\nfive\n")
    prefix = tmp_path / "out"
    main([str(text), "--output", str(prefix), "--tokenizer", "byte", "--split-on", rule])
    kept = [d for d in expected if d.strip()]  # a blank run of lines is no document
    check_round_trip(prefix, ByteTokenizer(), kept)
    count = len(kept)
    assert f"[prepare] {count} document{'s' if count != 1 else ''}," in capsys.readouterr().out


def test_split_on_a_bad_rule_is_one_line_and_exit_2(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main([str(tmp_path / "x.txt"), "--output", str(tmp_path / "o"), "--tokenizer", "byte",
              "--split-on", "lines:0"])
    assert exit_.value.code == 2
    assert "'lines:0' is not file, blank or lines:N" in capsys.readouterr().err


def test_a_json_file_is_read_as_json_lines(tmp_path, capsys):
    lines = "".join(json.dumps({"text": text}) + "\n" for text in JSONL_TEXTS)
    (tmp_path / "c.json").write_text(lines, encoding="utf-8")
    (tmp_path / "c.jsonl").write_text(lines, encoding="utf-8")
    for name in ("c.json", "c.jsonl"):
        main([str(tmp_path / name), "--output", str(tmp_path / name.replace(".", "_")),
              "--tokenizer", "byte"])
        assert "[prepare] 2 documents," in capsys.readouterr().out
    check_round_trip(tmp_path / "c_json", ByteTokenizer(), JSONL_TEXTS)
    for suffix in (".bin", ".idx"):  # the same dataset as from the .jsonl
        assert (tmp_path / f"c_json{suffix}").read_bytes() == \
            (tmp_path / f"c_jsonl{suffix}").read_bytes()


def user_folder(folder):
    """A user's data: JSON-lines corpus.json and corpus.jsonl, x.bin (plain text named like an
    output), hard.json (a hard link to corpus.json), alias.json (a symlink to corpus.jsonl) and
    link (a symlink to the folder itself)."""
    (folder / "corpus.json").write_text('{"text": "the corpus"}\n')
    (folder / "corpus.jsonl").write_text('{"text": "another corpus"}\n')
    (folder / "x.bin").write_text("plain text in a file named like an output\n")
    os.link(folder / "corpus.json", folder / "hard.json")
    (folder / "alias.json").symlink_to("corpus.jsonl")
    (folder / "link").symlink_to(folder, target_is_directory=True)


def snapshot(folder):
    """Every entry under `folder` (symlinks not followed): its bytes, or where a symlink points."""
    entries = {}
    for root, dirs, files in os.walk(folder):
        for name in dirs + files:
            path = Path(root, name)
            entries[str(path.relative_to(folder))] = (
                os.readlink(path) if path.is_symlink() else path.read_bytes() if path.is_file()
                else "dir")
    return entries


OTHER = "pick another --output, like {}_text_document"
COLLISIONS = [
    (["corpus.json", "--output", "corpus"], "--output corpus would write corpus.json, the same "
     "file as the input corpus.json; " + OTHER.format("corpus")),
    (["{d}/corpus.json", "--output", "corpus"], "--output corpus would write corpus.json, the "
     "same file as the input {d}/corpus.json; " + OTHER.format("corpus")),
    (["corpus.json", "--output", "../{name}/corpus"], "--output ../{name}/corpus would write "
     "../{name}/corpus.json, the same file as the input corpus.json; "
     + OTHER.format("../{name}/corpus")),
    (["corpus.json", "--output", "link/corpus"], "--output link/corpus would write "
     "link/corpus.json, the same file as the input corpus.json; " + OTHER.format("link/corpus")),
    (["corpus.json", "--output", "hard"], "--output hard would write hard.json, the same file as "
     "the input corpus.json; " + OTHER.format("hard")),
    (["corpus.jsonl", "--output", "alias"], "--output alias would write alias.json, the same file "
     "as the input corpus.jsonl; " + OTHER.format("alias")),
    (["x.bin", "--output", "x"], "--output x would write x.bin, the same file as the input x.bin; "
     + OTHER.format("x")),
    (["corpus.jsonl", "link/x.bin", "--output", "{d}/x"], "--output {d}/x would write {d}/x.bin, "
     "the same file as the input link/x.bin; " + OTHER.format("{d}/x")),
    (["corpus.json", "--output", "corpus.json"], "--output corpus.json: give a prefix without "
     ".json, like corpus_text_document (corpus would write over an input); the .bin, .idx and "
     ".json are added to it"),
]


@pytest.mark.parametrize("args, message", COLLISIONS, ids=[
    "json_stem", "absolute_input", "relative_output", "symlinked_folder", "hard_link",
    "output_is_a_symlink_to_the_input", "input_named_like_an_output", "several_inputs",
    "input_as_output"])
def test_an_output_that_is_an_input_is_refused_and_nothing_written(tmp_path, args, message):
    user_folder(tmp_path)
    before = snapshot(tmp_path)
    names = {"d": tmp_path, "name": tmp_path.name}
    proc = subprocess.run([*PREPARE, *(a.format(**names) for a in args), "--tokenizer", "byte"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == ["error: " + message.format(**names)]
    assert snapshot(tmp_path) == before
