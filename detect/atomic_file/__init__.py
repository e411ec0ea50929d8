"""The one way a command writes a file or makes a folder: whole or not at all (a temporary renamed over the file),
at the place its path leads to now, and never over or into what the command reads (its sources: the data yaml, a
split's image and label folders, annotation files, the weights, the images it predicts). docs/architecture.md, "One
writer", says the rules; tests/test_one_writer.py holds the package to them."""

from detect.atomic_file.places import Refused, WriteError, check_output_folder, command, output_folder, protect
from detect.atomic_file.writes import (
    TEMPORARY_SUFFIX,
    Draft,
    VideoFile,
    append_text,
    copy_file,
    link_file,
    make_folder,
    open_stream,
    publish,
    remove_file,
    remove_folder,
    remove_tree,
    replace_folder,
    replacing,
    write_bytes,
    write_image,
    write_text,
)

__all__ = ["TEMPORARY_SUFFIX", "Draft", "Refused", "VideoFile", "WriteError", "append_text", "check_output_folder", "command",
           "copy_file", "link_file", "make_folder", "open_stream", "output_folder", "protect", "publish", "remove_file",
           "remove_folder", "remove_tree", "replace_folder", "replacing", "write_bytes", "write_image", "write_text"]
