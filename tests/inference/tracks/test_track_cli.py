"""python -m detect.track end to end with yolov5n.pt on clips cut from coco128 (tests/inference/tracks/clips.py): a
video, a folder of frames with a corrupt one, a looped live stream, a stream that stalls, frames whose size changes, a
video that cannot be opened, --slice on frames larger than the input size, and the hub model's track call per
stream."""

from __future__ import annotations

import logging
from pathlib import Path

import cv2
import numpy as np
import pytest

from detect import track
from detect.hub import HubModel
from detect.inference import streams
from detect.inference.detector import Detector, PredictSettings
from tests.inference.stream_server import StreamServer
from tests.inference.tracks.clips import clip
from tests.shared_data import YOLOV5N, needs_shared

pytestmark = [needs_shared, pytest.mark.slow]
FLAGS = ["--weights", str(YOLOV5N), "--imgsz", "320", "--device", "cpu", "--no-progress"]


def read_mot(path: Path) -> np.ndarray:
    """(n, 8) rows of a MOT file: frame, id, x, y, w, h, conf, class."""
    return np.loadtxt(path, delimiter=",", ndmin=2)


def iou(box: np.ndarray, other: np.ndarray) -> float:
    width = max(min(box[2], other[2]) - max(box[0], other[0]), 0)
    height = max(min(box[3], other[3]) - max(box[1], other[1]), 0)
    union = np.prod(box[2:] - box[:2]) + np.prod(other[2:] - other[:2]) - width * height
    return float(width * height / union)


def person_ids(rows: np.ndarray, boxes: list[np.ndarray], frames: list[int]) -> dict[int, int]:
    """Frame -> the id of the track on the true box of the person (class 0, IoU >= 0.5) in that frame, where one is."""
    found = {}
    for number, truth in zip(frames, boxes):
        for row in rows[(rows[:, 0] == number) & (rows[:, 7] == 0)]:
            if iou(np.array([row[2], row[3], row[2] + row[4], row[3] + row[5]]), truth) >= 0.5:
                found[number] = int(row[1])
    return found


def write_video(path: Path, images: list[np.ndarray], fps: float = 10.0) -> Path:
    writer = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), fps, images[0].shape[1::-1])
    for image in images:
        writer.write(image)
    writer.release()
    return path


def frame_count(path: Path) -> tuple[int, tuple[int, int]]:
    capture = cv2.VideoCapture(str(path))
    count, size = 0, None
    while True:
        ok, image = capture.read()
        if not ok:
            break
        count, size = count + 1, image.shape[:2]
    capture.release()
    return count, size


def test_a_video_gives_its_mot_file_and_video_with_one_id_for_the_person(tmp_path, caplog):
    images, boxes = clip(8, (320, 320), 160, step=4)
    video = write_video(tmp_path / "walk.avi", images)
    with caplog.at_level(logging.INFO):
        assert track.main(["--source", str(video), "--project", str(tmp_path / "runs"), *FLAGS]) == 0
    run = tmp_path / "runs" / "exp"
    assert sorted(path.name for path in run.iterdir()) == ["walk.mp4", "walk.txt"]
    rows = read_mot(run / "walk.txt")
    ids = person_ids(rows, boxes, list(range(1, 9)))
    assert len(ids) >= 6 and len(set(ids.values())) == 1  # from its second frame at the latest, one id throughout
    assert set(rows[:, 0]) <= set(range(1, 9)) and (rows[:, 4:6] > 0).all() and (rows[:, 1] >= 1).all()
    assert frame_count(run / "walk.mp4") == (8, (320, 320))
    summary = next(message for message in caplog.messages if message.startswith("1 sequence, 8 frames, "))
    assert "person" in summary and "frames/s with bytetrack" in summary


def test_a_folder_of_frames_with_a_corrupt_one_skips_it_by_name_and_keeps_the_id(tmp_path, caplog):
    images, boxes = clip(9, (320, 320), 160, step=4)
    frames = tmp_path / "frames"
    frames.mkdir()
    for index, image in enumerate(images, 1):
        cv2.imwrite(str(frames / f"{index:04d}.jpg"), image)
    (frames / "0005.jpg").write_bytes(b"\xff\xd8 not a jpeg")
    with caplog.at_level(logging.INFO):
        assert track.main(["--source", str(frames), "--project", str(tmp_path / "runs"), "--nosave", *FLAGS]) == 0
    run = tmp_path / "runs" / "exp"
    assert [path.name for path in run.iterdir()] == ["frames.txt"]  # --nosave: no video
    rows = read_mot(run / "frames.txt")
    assert 5 not in rows[:, 0] and max(rows[:, 0]) == 9  # the frames keep their numbers around the gap
    ids = person_ids(rows, boxes, list(range(1, 10)))
    assert {4, 6} <= set(ids) and len(set(ids.values())) == 1  # the same id before and after the corrupt frame
    assert "1 frame(s) skipped" in caplog.text and "0005.jpg" in caplog.text
    assert sorted(path.name for path in tmp_path.iterdir()) == ["frames", "runs"]  # nothing written elsewhere


def test_frames_whose_size_changes_keep_their_tracks(tmp_path, caplog):
    images, boxes = clip(8, (320, 320), 160, step=4)
    frames = tmp_path / "camera"
    frames.mkdir()
    for index, image in enumerate(images, 1):
        if index > 4:  # the camera drops to 240 x 240
            image, boxes[index - 1] = cv2.resize(image, (240, 240), interpolation=cv2.INTER_AREA), boxes[index - 1] * 0.75
        cv2.imwrite(str(frames / f"{index:04d}.png"), image)
    with caplog.at_level(logging.INFO):
        assert track.main(["--source", str(frames), "--project", str(tmp_path / "runs"), *FLAGS]) == 0
    run = tmp_path / "runs" / "exp"
    ids = person_ids(read_mot(run / "camera.txt"), boxes, list(range(1, 9)))  # each frame in its own pixels
    assert {3, 4, 5, 6} <= set(ids) and len(set(ids.values())) == 1
    assert "4 frame(s) of another size than their sequence's first" in caplog.text
    assert frame_count(run / "camera.mp4") == (8, (320, 320))


def test_a_looped_stream_is_tracked_until_it_ends(tmp_path, caplog):
    images, _ = clip(6, (320, 320), 160, step=4)
    server = StreamServer(interval=0.05, loop=images)
    server.streams["/cam"] = [18]  # three times round the clip, then the stream ends
    server.start()
    try:
        with caplog.at_level(logging.INFO):
            code = track.main(["--source", server.url("/cam"), "--project", str(tmp_path / "runs"), *FLAGS])
    finally:
        server.stop()
    assert code == 0
    run = tmp_path / "runs" / "exp"
    name = "http___127_0_0_1_" + server.url("/cam").split(":")[-1].replace("/", "_")
    rows = read_mot(run / f"{name}.txt")
    assert len(rows) and (np.diff(rows[:, 0]) >= 0).all() and set(rows[:, 7]) >= {0}
    assert (run / f"{name}.mp4").is_file() and "ended after 18 frames" in caplog.text


def test_a_video_that_cannot_be_opened_is_one_line_and_exit_2(tmp_path, capsys):
    broken = tmp_path / "broken.mp4"
    broken.write_bytes(b"\x00" * 512)
    code = track.main(["--source", str(broken), "--project", str(tmp_path / "runs"), *FLAGS])
    error = capsys.readouterr().err.strip().splitlines()[-1]
    assert code == 2
    assert error == f"error: --source {broken}: no frame could be tracked ({broken}: cannot open the video)"
    assert list((tmp_path / "runs" / "exp").iterdir()) == []


def test_slice_tracks_a_person_too_small_for_the_input_size(tmp_path):
    images, boxes = clip(5, (480, 640), 64, step=4)  # 64 px tall in 640: 16 px once fitted into 160
    video = write_video(tmp_path / "far.avi", images)
    common = ["--source", str(video), "--project", str(tmp_path / "runs"), "--nosave", *FLAGS, "--imgsz", "160"]
    assert track.main([*common, "--name", "plain"]) == 0
    assert track.main([*common, "--name", "sliced", "--slice", "320"]) == 0
    plain = person_ids(read_mot(tmp_path / "runs" / "plain" / "far.txt"), boxes, list(range(1, 6)))
    sliced = person_ids(read_mot(tmp_path / "runs" / "sliced" / "far.txt"), boxes, list(range(1, 6)))
    assert not plain
    assert len(sliced) >= 3 and len(set(sliced.values())) == 1  # whole-frame boxes, one id


def test_the_detector_and_the_hub_model_keep_a_state_per_stream():
    images, _ = clip(4, (320, 320), 160, step=4)
    detector = Detector(str(YOLOV5N), "cpu", PredictSettings(imgsz=(320, 320), conf_threshold=0.1))
    first = [detector.track(image, stream="a") for image in images]
    hub = HubModel(detector)
    hub.conf = 0.1
    again = [hub.track(image[:, :, ::-1], stream="b", size=320) for image in images]  # the hub takes RGB arrays
    for mine, theirs in zip(first, again):
        np.testing.assert_array_equal(mine.ids, theirs.ids)
    detector.reset_tracks("a")
    assert "a" not in detector.tracking.streams and "b" in detector.tracking.streams
    hub.reset_tracks()
    assert detector.tracking.streams == {}


def test_a_stream_that_stalls_ends_in_one_line_and_keeps_its_tracks(tmp_path, caplog, monkeypatch):
    monkeypatch.setattr(streams, "READ_TIMEOUT_MS", 1500)  # FFmpeg gives up on a silent stream after this
    images, _ = clip(6, (320, 320), 160, step=4)
    server = StreamServer(interval=0.05, loop=images, stall=(8, 30.0))  # 8 frames, then silence
    server.streams["/cam"] = [30]
    server.start()
    try:
        with caplog.at_level(logging.INFO):
            code = track.main(["--source", server.url("/cam"), "--project", str(tmp_path / "runs"), *FLAGS])
    finally:
        server.stop()
    assert code == 0
    rows = read_mot(next((tmp_path / "runs" / "exp").glob("*.txt")))
    assert 0 < rows[:, 0].max() <= 8  # what came before the stall is tracked and kept
    assert "ended after 8 frames (it could not be reopened)" in caplog.text
