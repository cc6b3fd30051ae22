"""launcher.files: outputs written whole or not at all."""

import os

import pytest

from launcher.files import replaced_whole, write_text_atomic


def test_a_block_that_raises_leaves_the_old_files_and_no_temporary_one(tmp_path):
    old = tmp_path / "corpus.bin"
    old.write_text("old")
    with pytest.raises(RuntimeError):
        with replaced_whole(str(old), str(tmp_path / "corpus.idx")) as (tmp_bin, tmp_idx):
            with open(tmp_bin, "w") as f:
                f.write("half")
            raise RuntimeError("the disk filled")
    assert old.read_text() == "old" and sorted(os.listdir(tmp_path)) == ["corpus.bin"]


def test_a_block_that_ends_replaces_every_file_readable_by_all(tmp_path):
    paths = [str(tmp_path / "a.bin"), str(tmp_path / "a.idx")]
    with replaced_whole(*paths) as temporary:
        for tmp, text in zip(temporary, ("bin", "idx")):
            with open(tmp, "w") as f:
                f.write(text)
    assert [open(p).read() for p in paths] == ["bin", "idx"]
    assert sorted(os.listdir(tmp_path)) == ["a.bin", "a.idx"]
    assert all(os.stat(p).st_mode & 0o777 == 0o644 for p in paths)
    write_text_atomic(paths[0], "again")
    assert open(paths[0]).read() == "again" and len(os.listdir(tmp_path)) == 2
