"""Downloading a published checkpoint: resumed with a range request after a cut, verified against the hash prefix its
name carries, renamed into place only when whole; errors are one line naming the URL.

The server is a real ``http.server`` on 127.0.0.1 serving a replica of a published file: the name follows
torchvision's convention (https://download.pytorch.org/models/resnet50-19c8e357.pth, ``<name>-<sha256 prefix>.pth``)
with the prefix of its content, a few MB of seeded random bytes (real weights are too large to ship).
"""

from __future__ import annotations

import hashlib
import logging
import random
import re
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from cog_pl.models import download as dl
from cog_pl.models.download import DownloadError, download, hash_prefix_of

SIZE = 3 * 2**20 + 12345  # a few MB, not a multiple of the read size


class ReplicaServer(ThreadingHTTPServer):
    """Serves ``data`` at ``/<name>``, honouring ``Range: bytes=N-`` (206, 416) unless told not to; can cut the
    connection after ``cut_after`` bytes once, or stall until released; records each request."""

    daemon_threads = True

    def __init__(self, data: bytes, name: str) -> None:
        super().__init__(("127.0.0.1", 0), ReplicaHandler)
        self.data, self.name = data, name
        self.honour_range = True
        self.cut_after: int | None = None
        self.stall = threading.Event()  # set: hold each response until `release` is set
        self.release = threading.Event()
        self.requests: list[tuple[str, str, str | None]] = []  # (method, path, Range header)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/{self.name}"


class ReplicaHandler(BaseHTTPRequestHandler):
    server: ReplicaServer

    def do_GET(self) -> None:
        self.serve(body=True)

    def do_HEAD(self) -> None:
        self.serve(body=False)

    def serve(self, body: bool) -> None:
        srv, data = self.server, self.server.data
        srv.requests.append((self.command, self.path, self.headers.get("Range")))
        if srv.stall.is_set():
            srv.release.wait(5)
        if self.path != f"/{srv.name}":
            self.send_error(404)
            return
        start = 0
        match = re.fullmatch(r"bytes=(\d+)-", self.headers.get("Range") or "")
        if match and srv.honour_range:
            start = int(match.group(1))
            if start >= len(data):
                self.send_response(416)
                self.send_header("Content-Range", f"bytes */{len(data)}")
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        self.send_header("Content-Length", str(len(data) - start))
        self.send_header("Accept-Ranges", "bytes")
        self.end_headers()
        if not body:
            return
        payload = data[start:]
        if srv.cut_after is not None:
            payload, srv.cut_after = payload[:srv.cut_after], None
            self.wfile.write(payload)
            self.close_connection = True
            self.connection.shutdown(socket.SHUT_RDWR)
            return
        self.wfile.write(payload)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def server():
    """A replica server on a free loopback port, stopped (and any stalled handler released) afterwards."""
    data = random.Random(0).randbytes(SIZE)
    srv = ReplicaServer(data, f"resnet50-{hashlib.sha256(data).hexdigest()[:8]}.pth")
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.release.set()
        srv.shutdown()
        srv.server_close()
        thread.join(5)


def one_line(err: pytest.ExceptionInfo) -> str:
    text = str(err.value)
    assert "\n" not in text
    return text


def test_full_download_verified_by_the_names_prefix(server, tmp_path, caplog):
    dest = tmp_path / "weights" / server.name
    with caplog.at_level(logging.INFO, logger="cog_pl"):
        assert download(server.url, dest, hash_prefix_of(server.name), progress=True, timeout=5) == dest
    assert dest.read_bytes() == server.data
    assert not dest.with_name(dest.name + ".part").exists()
    assert server.requests == [("GET", f"/{server.name}", None)]
    assert "3.2 MB in" in caplog.text  # the closing progress line (stderr is no terminal under pytest)


def test_cut_transfer_keeps_the_part_and_the_next_call_asks_only_for_the_rest(server, tmp_path):
    dest, cut = tmp_path / server.name, 1_000_000
    part = dest.with_name(dest.name + ".part")
    server.cut_after = cut
    with pytest.raises(DownloadError) as err:
        download(server.url, dest, hash_prefix_of(server.name), progress=False, timeout=5)
    line = one_line(err)
    assert server.url in line and f"byte {cut} of {SIZE}" in line and str(part) in line
    assert not dest.exists() and part.read_bytes() == server.data[:cut]
    download(server.url, dest, hash_prefix_of(server.name), progress=False, timeout=5)
    assert server.requests[-1][2] == f"bytes={cut}-" and len(server.requests) == 2
    assert dest.read_bytes() == server.data and not part.exists()


def test_wrong_prefix_is_refused_and_nothing_is_left(server, tmp_path):
    dest = tmp_path / server.name
    digest = hashlib.sha256(server.data).hexdigest()
    assert not digest.startswith("deadbeef")
    with pytest.raises(ValueError) as err:
        download(server.url, dest, "deadbeef", progress=False, timeout=5)
    line = one_line(err)
    assert str(dest) in line and "deadbeef" in line and digest in line
    assert list(tmp_path.iterdir()) == []


def test_server_that_ignores_the_range_restarts_from_zero(server, tmp_path):
    dest = tmp_path / server.name
    part = dest.with_name(dest.name + ".part")
    part.write_bytes(b"\0" * 500_000)  # not the file's first bytes: appending to it would fail the hash
    server.honour_range = False
    download(server.url, dest, hash_prefix_of(server.name), progress=False, timeout=5)
    assert server.requests == [("GET", f"/{server.name}", "bytes=500000-")]
    assert dest.read_bytes() == server.data and not part.exists()


def test_complete_part_refused_range_is_renamed_without_a_transfer(server, tmp_path):
    """A part cut after its last byte: the server answers 416 with the size, which equals the part's."""
    dest = tmp_path / server.name
    dest.with_name(dest.name + ".part").write_bytes(server.data)
    download(server.url, dest, hash_prefix_of(server.name), progress=False, timeout=5)
    assert server.requests == [("GET", f"/{server.name}", f"bytes={SIZE}-")]
    assert dest.read_bytes() == server.data


def test_404_is_one_line_naming_the_url(server, tmp_path):
    url = server.url.replace(server.name, "missing-0123abcd.pth")
    with pytest.raises(DownloadError) as err:
        download(url, tmp_path / "missing-0123abcd.pth", progress=False, timeout=5)
    line = one_line(err)
    assert url in line and "HTTP 404" in line
    assert list(tmp_path.iterdir()) == []


def test_connection_refused_and_timeout_are_one_line_naming_the_url(server, tmp_path):
    with socket.socket() as sock:  # a port nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/{server.name}"
    with pytest.raises(DownloadError) as err:
        download(url, tmp_path / server.name, progress=False, timeout=5)
    assert one_line(err) == f"cannot download {url}: connection refused"
    server.stall.set()
    with pytest.raises(DownloadError) as err:
        download(server.url, tmp_path / server.name, progress=False, timeout=0.3)
    assert one_line(err) == f"cannot download {server.url}: timed out after 0.3 s"
    assert list(tmp_path.iterdir()) == []


def test_existing_good_dest_is_not_fetched_again(server, tmp_path, caplog):
    dest = tmp_path / server.name
    dest.write_bytes(server.data)
    with caplog.at_level(logging.INFO, logger="cog_pl"):
        assert download(server.url, dest, hash_prefix_of(server.name), progress=False, timeout=5) == dest
    assert server.requests == []
    assert "not downloaded again" in caplog.text


def test_existing_dest_that_fails_the_prefix_is_replaced(server, tmp_path):
    dest = tmp_path / server.name
    dest.write_bytes(b"truncated")
    download(server.url, dest, hash_prefix_of(server.name), progress=False, timeout=5)
    assert dest.read_bytes() == server.data and len(server.requests) == 1


def test_progress_on_a_terminal_is_a_bar_with_bytes_rate_and_eta(server, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(dl, "is_terminal", lambda stream=None: True)
    download(server.url, tmp_path / server.name, progress=True, timeout=5)
    bar = capsys.readouterr().err.rsplit("\r", 1)[-1]
    assert server.name in bar and "3.16M/3.16M" in bar and "B/s" in bar and "<00:00" in bar


@pytest.mark.parametrize(("name", "prefix"), [
    ("resnet50-19c8e357.pth", "19c8e357"),  # torchvision
    ("deit_small_patch16_224-cd65a155.pth", "cd65a155"),  # DeiT's release
    ("https://download.pytorch.org/models/vit_b_16_swag-9ac1b537.pth", "9ac1b537"),
    ("efficientnet_b0_rwightman-7f5810bc.pth", "7f5810bc"),
    ("moco_v2_800ep_pretrain.pth.tar", None),
    ("net.weights", None),
    ("efficientnet-b0.pth", None),  # a hex-looking word, not a hash
])
def test_hash_prefix_of_follows_torch_hub(name, prefix):
    from torch.hub import HASH_REGEX

    assert hash_prefix_of(name) == prefix
    if prefix is not None:  # where a name carries a hash, torch.hub reads the same one
        assert HASH_REGEX.search(Path(name).name).group(1) == prefix


def test_part_longer_than_the_file_is_downloaded_again(server, tmp_path):
    """416 with a size that is not the part's: the part is not this file, it is replaced by a whole download."""
    dest = tmp_path / server.name
    dest.with_name(dest.name + ".part").write_bytes(server.data + b"stale")
    download(server.url, dest, hash_prefix_of(server.name), progress=False, timeout=5)
    assert [r[2] for r in server.requests] == [f"bytes={SIZE + 5}-", None]
    assert dest.read_bytes() == server.data


@pytest.fixture
def published(tmp_path):
    """A mirror of a real checkpoint (a ResNet-50 state dict without its head, as facebookresearch/barlowtwins
    publishes ``resnet50.pth``; the zoo knows no digest of that file), its name carrying the prefix of its own
    sha256 as torchvision's names do."""
    import io

    import torch
    import torchvision

    buf = io.BytesIO()
    torch.manual_seed(0)
    torch.save({k: v for k, v in torchvision.models.resnet50().state_dict().items() if not k.startswith("fc.")}, buf)
    data = buf.getvalue()
    srv = ReplicaServer(data, f"resnet50-{hashlib.sha256(data).hexdigest()[:8]}.pth")
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        yield srv
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(5)


def test_models_download_resumes_after_a_cut_and_run_finds_the_file(published, tmp_path, capsys):
    from cog_pl.cli.main import main
    from cog_pl.models.files import default_checkpoint

    models = tmp_path / "models"
    published.cut_after = 2_000_000
    assert main(["models", "download", "barlowtwins", str(models), "--url", published.url, "--no-progress"]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "interrupted at byte 2000000" in err[0] and published.url in err[0]
    assert main(["models", "download", "barlowtwins", str(models), "--url", published.url, "--no-progress"]) == 0
    dest = models / "barlowtwins" / published.name
    digest = hashlib.sha256(published.data).hexdigest()
    assert capsys.readouterr().out.strip() == (f"barlowtwins: {dest} (sha256 {digest[:12]}..., verified against the "
                                               "digest its URL's name carries)")
    assert dest.read_bytes() == published.data and published.requests[-1][2] == "bytes=2000000-"
    assert default_checkpoint("barlowtwins", models) == str(dest)  # cog-pl run --model barlowtwins takes it
    assert main(["models", "check", "barlowtwins", str(dest)]) == 0


def test_models_download_refuses_a_file_whose_hash_is_not_its_names(published, tmp_path, capsys):
    from cog_pl.cli.main import main

    published.name = "resnet50-00000000.pth"  # the content's digest does not start so
    url = published.url
    assert main(["models", "download", "barlowtwins", str(tmp_path), "--url", url, "--no-progress"]) == 2
    line = capsys.readouterr().err.strip()
    assert "does not start with the expected 00000000" in line and "\n" not in line
    assert not any((tmp_path / "barlowtwins").glob("*"))


def test_models_download_of_a_manual_file_says_where_to_get_it(tmp_path, capsys):
    """Asking for a manual file's steps is answered (exit 0, on stdout): where it is published, the name to save it as
    and the folder cog-pl run looks in; a one-time conversion is named once, after the download."""
    from cog_pl.cli.main import main
    from cog_pl.models.zoo import PAPER_MODELS

    assert main(["models", "download", "t2t_vit_t_14", str(tmp_path)]) == 0
    out = capsys.readouterr()
    line = out.out.strip()
    assert out.err == "" and "\n" not in line
    assert "81.7_T2T_ViTt_14.pth.tar" in line and "yitu-opensource/T2T-ViT" in line
    assert f"put 81.7_T2T_ViTt_14.pth.tar in {tmp_path / 't2t_vit_t_14'}/" in line
    assert main(["models", "download", "byol", str(tmp_path)]) == 0
    line = capsys.readouterr().out
    assert "chigur/byol-convert" in line and line.count("convert it") == 1  # the one-time conversion is named once
    assert main(["models", "download", "simclr_v2", str(tmp_path)]) == 0
    line = capsys.readouterr().out
    assert line.count("convert") == 2 and "then convert it once: python convert.py" in line  # (the script's name)
    assert "put r50_1x_sk0.pth in" in line
    for name in ("compress", "mixup", "manifold_mixup", "cutmix"):  # each names the file to save
        file = PAPER_MODELS[name].published.file
        assert "." in file and " " not in file, file
        assert main(["models", "download", name, str(tmp_path)]) == 0
        assert f"download {file} " in capsys.readouterr().out
    assert PAPER_MODELS["cutmix"].published.file == "model_best.pth.tar"  # clovaai/CutMix-PyTorch README, train.py


def test_models_download_without_network_is_one_line_naming_a_mirror_and_the_folder(tmp_path, monkeypatch, capsys):
    """No network (the host's name not found): one line at once, naming the URL, --url (a mirror) and where to put
    a file fetched another way; nothing is left in the folder."""
    from cog_pl.cli.main import main
    from cog_pl.models.zoo import PAPER_MODELS

    def no_network(host, *args, **kwargs):
        raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    assert main(["models", "download", "dino", str(tmp_path), "--no-progress"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    pub = PAPER_MODELS["dino"].published
    assert len(lines) == 1 and lines[0].startswith(f"cog-pl models: error: dino: cannot download {pub.url}: ")
    assert "Name or service not known" in lines[0] and "no network?" in lines[0]
    assert "--url URL" in lines[0] and f"put {pub.file} fetched another way in {tmp_path / 'dino'}/" in lines[0]
    assert not any((tmp_path / "dino").glob("*"))


def test_a_host_lookup_that_hangs_is_given_up_after_the_connect_timeout(server, tmp_path, monkeypatch):
    """A resolver that does not answer (a machine without network can wait many seconds): the download gives up
    after the connect timeout, not the read timeout, saying so in one line."""
    stuck = threading.Event()

    def hanging(host, *args, **kwargs):
        stuck.wait(30)
        raise socket.gaierror(socket.EAI_AGAIN, "Temporary failure in name resolution")

    monkeypatch.setattr(socket, "getaddrinfo", hanging)
    url = server.url.replace("127.0.0.1", "models.example")
    try:
        with pytest.raises(DownloadError) as err:
            download(url, tmp_path / server.name, progress=False, timeout=60, connect_timeout=0.2)
    finally:
        stuck.set()
    assert one_line(err) == f"cannot download {url}: could not look up models.example within 0.2 s (no network?)"
    assert dl.CONNECT_TIMEOUT <= 10  # the default: a few seconds, not the read timeout's minute
    assert list(tmp_path.iterdir()) == []


def test_the_docs_say_hash_checked_only_for_files_whose_digest_is_known():
    """A docs line ``cog-pl models download NAME ... hash checked`` names a model whose published file's digest the
    zoo knows (its name's torch.hub prefix, or a stated digest): for the others the digest is recorded, not checked."""
    from cog_pl.models.label import published_prefix
    from cog_pl.models.zoo import PAPER_MODELS

    root = Path(__file__).resolve().parents[2]
    found = []
    for page in [root / "README.md", *sorted((root / "docs").rglob("*.md"))]:
        for number, line in enumerate(page.read_text().splitlines(), 1):
            match = re.search(r"cog-pl models download (\w+).*hash[- ]checked", line)
            if match and match.group(1) in PAPER_MODELS:
                found.append((f"{page.relative_to(root)}:{number}", match.group(1)))
    wrong = [(where, name) for where, name in found if published_prefix(PAPER_MODELS[name]) is None]
    assert not wrong, f"'hash checked' for files whose digest the zoo does not know: {wrong}"


def test_models_download_extracts_the_member_of_a_release_zip(tmp_path, capsys):
    """OBoW publishes its backbone inside a release zip (valeoai/obow v0.1.0): the member is extracted, the zip
    removed."""
    import io
    import zipfile

    from cog_pl.cli.main import main
    from cog_pl.models.zoo import PAPER_MODELS

    pub = PAPER_MODELS["obow"].published
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        zf.writestr(pub.member, b"the checkpoint's bytes")
        zf.writestr("ImageNetFull_ResNet50_OBoW_full_feature_extractor/README", b"other")
    srv = ReplicaServer(buf.getvalue(), pub.url.rsplit("/", 1)[-1])
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    try:
        assert main(["models", "download", "obow", str(tmp_path), "--url", srv.url, "--no-progress"]) == 0
    finally:
        srv.shutdown()
        srv.server_close()
        thread.join(5)
    dest = tmp_path / "obow" / pub.file
    assert dest.read_bytes() == b"the checkpoint's bytes"
    assert sorted(p.name for p in dest.parent.iterdir()) == [pub.file, pub.file + ".download.json"]
    assert capsys.readouterr().out.strip().startswith(f"obow: {dest} (unverified: the zoo knows no digest of it")
