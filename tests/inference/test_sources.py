"""--source as yolov5 takes it: files, folders, globs, .txt lists, video strides, an image URL, live MJPEG streams
served by the test on 127.0.0.1 (latest frame, reconnect once, one line at the end), .streams lists, webcams."""

from __future__ import annotations

import logging
import socket
import threading
from contextlib import closing
from pathlib import Path

import cv2
import pytest

from detect.errors import UserError
from detect.inference.sources import open_source
from detect.inference.streams import LiveStream, stream_name
from tests.inference.stream_server import FRAME_SHAPE, StreamServer, frame_number, grey_frame


@pytest.fixture
def server():
    serving = StreamServer()
    serving.start()
    yield serving
    serving.stop()


def write_video(path: Path, count: int) -> Path:
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 10.0, FRAME_SHAPE[::-1])
    for index in range(count):
        writer.write(grey_frame(index))
    writer.release()
    return path


def read_all(source: str, vid_stride: int = 1) -> list:
    with closing(open_source(source, vid_stride)) as frames:
        return list(frames)


def test_files_folders_globs_and_lists(tmp_path):
    for name in ("a.jpg", "b.png", "sub/c.jpg"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        cv2.imwrite(str(tmp_path / name), grey_frame(1))
    (tmp_path / "notes.md").write_text("not media")
    (tmp_path / "list.txt").write_text("sub\nb.png\n\n*.jpg\n")  # a folder, a file and a glob, from the list's folder
    assert [f.path.name for f in read_all(str(tmp_path / "a.jpg"))] == ["a.jpg"]
    assert [f.path.name for f in read_all(str(tmp_path))] == ["a.jpg", "b.png"]  # not recursive, media only
    assert [f.path.name for f in read_all(str(tmp_path / "**" / "*.jpg"))] == ["a.jpg", "c.jpg"]
    frames = read_all(str(tmp_path / "list.txt"))
    assert [(f.path.name, f.position, f.total) for f in frames] == [("c.jpg", 1, 3), ("b.png", 2, 3), ("a.jpg", 3, 3)]
    assert all(not f.video and f.image.shape == (*FRAME_SHAPE, 3) for f in frames)


def test_vid_stride_keeps_every_nth_frame_of_a_video(tmp_path):
    clip = write_video(tmp_path / "clip.avi", 7)
    frames = read_all(str(clip), vid_stride=3)
    assert [f.index for f in frames] == [2, 5]  # the 3rd and 6th, as yolov5's grab-N-then-retrieve
    assert [frame_number(f.image) for f in frames] == [2, 5]
    assert all(f.count == 7 and f.fps == pytest.approx(10 / 3) and f.video and not f.stream for f in frames)


def test_an_image_url_is_downloaded_named_as_the_user_did_and_removed_after(server):
    server.files["/pics/bus.jpg"] = cv2.imencode(".jpg", grey_frame(3))[1].tobytes()
    url = server.url("/pics/bus.jpg?size=large")
    with closing(open_source(url)) as source:
        (frame,) = list(source)
        assert frame.path.name == "bus.jpg" and frame.path.exists() and frame.name == url
        assert frame_number(frame.image) == 3 and not frame.video
    assert not frame.path.exists() and not frame.path.parent.exists()


def test_a_video_url_is_read_as_a_video(server, tmp_path):
    server.files["/clip.avi"] = write_video(tmp_path / "clip.avi", 5).read_bytes()
    assert [f.index for f in read_all(server.url("/clip.avi"), vid_stride=2)] == [1, 3]


def test_a_failed_download_is_one_line(server):
    with pytest.raises(UserError) as raised:
        open_source(server.url("/gone.jpg"))
    assert str(raised.value) == f"--source {server.url('/gone.jpg')}: cannot download it (HTTP 404 Not Found)"


def test_a_live_stream_yields_its_frames_and_ends_in_one_line(server, caplog):
    server.streams["/live"] = [12]
    with caplog.at_level(logging.INFO, logger="detect"):
        frames = read_all(server.url("/live"))
    assert frames and all(f.stream and f.video and f.count == 0 and f.position == f.total == 1 for f in frames)
    indices = [f.index for f in frames]
    assert indices == sorted(set(indices)) and indices[-1] == 11  # in order, none twice, the last one included
    assert [frame_number(f.image) for f in frames] == indices
    assert frames[0].path.name == stream_name(server.url("/live")) and frames[0].name == server.url("/live")
    assert "." not in frames[0].path.name  # a file stem for <name>.mp4 and <name>_<frame>.txt
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warnings == [f"stream {server.url('/live')} ended after 12 frames (it could not be reopened)"]


def test_a_slow_reader_gets_the_latest_frame(server):
    server.streams["/live"] = [30]
    stream = LiveStream(server.url("/live"))
    seen = []
    try:
        while (newest := stream.latest()) is not None:
            seen.append(newest[0])
            stream._thread.join(0.1)  # a slow model (0.1 s a frame, the server 0.01 s): the stream runs on meanwhile
    finally:
        stream.close()
    assert len(seen) <= 15 and seen == sorted(set(seen)) and seen[-1] == 29 and stream.read_count == 30


def test_a_lost_stream_reconnects_once(server, caplog):
    server.streams["/live"] = [5, 4]  # the first connection drops after 5 frames, the second after 4, then 404
    with caplog.at_level(logging.INFO, logger="detect"):
        frames = read_all(server.url("/live"))
    assert [frame_number(f.image) for f in frames] == [f.index for f in frames] and frames[-1].index == 8
    warnings = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    url = server.url("/live")
    assert warnings == [f"stream {url} was lost after 5 frames and reconnected",
                        f"stream {url} ended after 9 frames (it could not be reopened)"]


def test_vid_stride_on_a_stream(server):
    server.streams["/live"] = [12]
    frames = read_all(server.url("/live"), vid_stride=4)
    assert frames and all((f.index + 1) % 4 == 0 for f in frames) and frames[-1].index == 11
    assert [frame_number(f.image) for f in frames] == [f.index for f in frames]


def test_a_streams_list_reads_each_stream(server, tmp_path):
    server.streams["/one"], server.streams["/two"] = [6], [3]
    listing = tmp_path / "cameras.streams"
    listing.write_text(f"{server.url('/one')}\n\n{server.url('/two')}\n")
    frames = read_all(str(listing))
    by_stream = {position: [f.index for f in frames if f.position == position] for position in (1, 2)}
    assert by_stream[1][-1] == 5 and by_stream[2][-1] == 2 and {f.total for f in frames} == {2}


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("source, message", [
    ("99", "--source 99: no camera at index 99"),
    ("rtsp://127.0.0.1:{port}/nothing", "cannot open the stream"),
    ("nowhere.streams", "--source nowhere.streams: cannot read it (No such file or directory)"),
])
def test_sources_that_cannot_be_opened_are_one_line(source, message):
    with pytest.raises(UserError) as raised:
        open_source(source.format(port=free_port()))  # the port picked when it runs: the test ids stay the same
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_one_stream_of_a_list_that_fails_closes_the_others(server, tmp_path):
    server.streams["/one"] = [1000]
    listing = tmp_path / "cameras.streams"
    listing.write_text(f"{server.url('/one')}\nhttp://127.0.0.1:{free_port()}/down\n")
    with pytest.raises(UserError, match="/down: cannot open the stream"):
        open_source(str(listing))
    assert f"stream {stream_name(server.url('/one'))}" not in [thread.name for thread in threading.enumerate()]
