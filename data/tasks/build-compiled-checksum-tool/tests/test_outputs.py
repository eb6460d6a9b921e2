import os
import shutil


def fletcher32(data):
    if len(data) % 2:
        data += b"\0"
    a = b = 0xFFFF
    for i in range(0, len(data), 2):
        a = (a + ((data[i] << 8) | data[i + 1])) % 65535
        b = (b + a) % 65535
    return (b << 16) | a


def test_tool_was_built_into_the_image():
    path = shutil.which("fletch")
    assert path == "/usr/local/bin/fletch", path
    with open(path, "rb") as f:
        assert f.read(4) == b"\x7fELF"  # compiled at build time, not a script
    assert not os.path.exists("/opt/fletch-src")  # the build step cleaned up


def test_checksums():
    names = sorted(os.listdir("/workspace/data"))
    want = ""
    for n in names:
        with open("/workspace/data/" + n, "rb") as f:
            want += "%08x  data/%s\n" % (fletcher32(f.read()), n)
    with open("/workspace/checksums.txt") as f:
        assert f.read() == want
