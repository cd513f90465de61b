"""``cog-pl features import|export``: the released code's X_Y.pth files to and from feature stores."""

import numpy as np
import torch

from cog_pl.cli import main as cli
from cog_pl.features.store import open_store


def _released(root, n=(30, 10), d=6):
    for split, rows in zip(("train", "test"), n):
        (root / f"features_{split}").mkdir(parents=True)
        torch.save({"X": torch.randn(rows, d), "Y": torch.randint(0, 1000, (rows,))},
                   root / f"features_{split}" / "X_Y.pth")
    return root


def test_import_export_round_trip(tmp_path):
    src = _released(tmp_path / "released" / "cog_l3")
    assert cli.main(["features", "import", str(src), str(tmp_path / "store"), "--model", "dino",
                     "--domain", "cog_l3"]) == 0
    s = open_store(tmp_path / "store" / "train", {"model": "dino", "domain": "cog_l3"})
    orig = torch.load(src / "features_train" / "X_Y.pth")
    assert np.allclose(s.features, orig["X"].numpy(), atol=1e-2) and np.array_equal(s.labels, orig["Y"].numpy())
    assert s.meta["num_classes"] == 1000 and s.meta["split"] == "train" and len(s.meta["classes"]) == 1000
    assert cli.main(["features", "export", str(tmp_path / "store"), str(tmp_path / "back")]) == 0
    back = torch.load(tmp_path / "back" / "features_test" / "X_Y.pth")
    assert back["X"].dtype == torch.float32 and back["Y"].dtype == torch.int64 and back["X"].shape == (10, 6)


def test_bad_pth_is_refused_with_the_reason(tmp_path, capsys):
    torch.save({"X": torch.zeros(3, 2), "Y": torch.zeros(4, dtype=torch.long)}, tmp_path / "X_Y.pth")
    assert cli.main(["features", "import", str(tmp_path / "X_Y.pth"), str(tmp_path / "s"), "--model", "m",
                     "--domain", "in1k", "--split", "train"]) == 2
    assert "'Y' must be an integer tensor of 3 labels" in capsys.readouterr().err
    torch.save({"X": torch.zeros(3, 2), "Y": torch.tensor([0, 1, 1000])}, tmp_path / "X_Y.pth")
    assert cli.main(["features", "import", str(tmp_path / "X_Y.pth"), str(tmp_path / "s"), "--model", "m",
                     "--domain", "in1k", "--split", "train"]) == 2
    assert "labels span 0..1000, but in1k has 1000 classes" in capsys.readouterr().err
    assert not (tmp_path / "s").exists()
