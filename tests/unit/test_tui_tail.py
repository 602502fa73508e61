"""Tailing a log by offset: complete lines only, bounded first read, truncation."""

from __future__ import annotations

from lat_tui.tail import FIRST_READ_BYTES, TailState, read_tail


def test_missing_file_reads_nothing(tmp_path):
    lines, state = read_tail(TailState(tmp_path / "train.log"))
    assert lines == [] and state.offset == -1


def test_only_complete_lines_are_handed_out(tmp_path):
    path = tmp_path / "train.log"
    path.write_text("one\ntwo\npart")
    lines, state = read_tail(TailState(path))
    assert lines == ["one", "two"]
    with path.open("a") as fh:
        fh.write("ial\nthree\n")
    lines, state = read_tail(state)
    assert lines == ["partial", "three"]
    assert read_tail(state)[0] == []


def test_first_read_of_a_big_log_starts_near_the_end(tmp_path):
    path = tmp_path / "train.log"
    path.write_text("".join(f"line {n:06d}\n" for n in range(60000)))
    lines, state = read_tail(TailState(path))
    assert lines[-1] == "line 059999"
    assert len("\n".join(lines)) <= FIRST_READ_BYTES
    assert all(line.startswith("line ") and len(line) == 11 for line in lines)


def test_truncated_file_is_read_again_from_the_start(tmp_path):
    path = tmp_path / "train.log"
    path.write_text("old 1\nold 2\n")
    _, state = read_tail(TailState(path))
    path.write_text("new\n")
    lines, _ = read_tail(state)
    assert lines == ["new"]


def test_bad_utf8_does_not_break_the_tail(tmp_path):
    path = tmp_path / "train.log"
    path.write_bytes(b"ok \xff\xfe\n")
    assert read_tail(TailState(path))[0] == ["ok \ufffd\ufffd"]


def test_an_ended_writers_last_line_without_newline_is_handed_out(tmp_path):
    path = tmp_path / "train.log"
    path.write_text("step 1\nerror: CUDA out of memory")
    lines, state = read_tail(TailState(path))
    assert lines == ["step 1"]
    lines, state = read_tail(state, ended=True)
    assert lines == ["error: CUDA out of memory"]
    assert read_tail(state, ended=True)[0] == []


def test_a_writer_more_than_a_read_ahead_is_caught_up_with_a_marker(tmp_path):
    path = tmp_path / "train.log"
    path.write_text("start\n")
    lines, state = read_tail(TailState(path))
    with path.open("a") as fh:
        fh.write("".join(f"line {n}\n" for n in range(200_000)))
    lines, state = read_tail(state)
    assert lines[0].startswith("[... ") and "KiB of log skipped to keep up" in lines[0]
    assert lines[-1] == "line 199999" and lines[1].startswith("line ")
    assert state.offset == path.stat().st_size
