import codecs
import subprocess


def test_package_installed_by_dpkg():
    out = subprocess.run(["dpkg-query", "-W", "-f", "${Status} ${Version}", "cseng-rot"],
                         capture_output=True, text=True)
    assert out.stdout == "install ok installed 1.2-1", out.stdout + out.stderr
    files = subprocess.run(["dpkg", "-L", "cseng-rot"], capture_output=True, text=True).stdout.split()
    assert "/usr/bin/rot" in files


def test_encoded():
    with open("/workspace/words.txt") as f:
        words = f.read().splitlines()
    with open("/workspace/encoded.txt") as f:
        got = f.read().splitlines()
    assert got == [codecs.encode(w, "rot13") for w in words]
