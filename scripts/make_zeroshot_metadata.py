"""Generate ``cog_pl/assets/openai_imagenet_zeroshot.json`` from open_clip's ``zero_shot_metadata.py``, never retyped.

The source holds OpenAI's 80 ImageNet prompt templates (``OPENAI_IMAGENET_TEMPLATES``, lambdas over f-strings), the 7
selected ones (``SIMPLE_IMAGENET_TEMPLATES``) and OpenAI's curated 1000 class names (``IMAGENET_CLASSNAMES``), all
from the notebook ``openai/CLIP notebooks/Prompt_Engineering_for_ImageNet.ipynb`` (MIT). The file is read with
``ast`` (nothing of it is run); each template is written as CLIP_benchmark writes templates, a string with ``{c}`` for
the class name (``clip_benchmark/datasets/en_zeroshot_classification_templates.json``).

Usage (the file of open_clip at the commit recorded in the output)::

    git -C OPEN_CLIP show COMMIT:src/open_clip/zero_shot_metadata.py > /tmp/zero_shot_metadata.py
    python scripts/make_zeroshot_metadata.py /tmp/zero_shot_metadata.py --commit COMMIT \\
        --license OPEN_CLIP/LICENSE
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import json
from pathlib import Path

ASSETS = Path(__file__).resolve().parents[1] / "cog_pl" / "assets"
NAMES = {"openai80": "OPENAI_IMAGENET_TEMPLATES", "openai7": "SIMPLE_IMAGENET_TEMPLATES"}


def _template(node: ast.expr) -> str:
    """``lambda c: f'a photo of a {c}.'`` -> ``'a photo of a {c}.'``."""
    if not (isinstance(node, ast.Lambda) and isinstance(node.body, ast.JoinedStr)
            and [a.arg for a in node.args.args] == ["c"]):
        raise SystemExit(f"line {node.lineno}: not a `lambda c: f'...'` template")
    out = []
    for part in node.body.values:
        if isinstance(part, ast.Constant):
            out.append(part.value.replace("{", "{{").replace("}", "}}"))
        elif isinstance(part, ast.FormattedValue) and isinstance(part.value, ast.Name) and part.value.id == "c":
            out.append("{c}")
        else:
            raise SystemExit(f"line {node.lineno}: unexpected part of the f-string")
    return "".join(out)


def read_metadata(source: str) -> dict:
    assigned = {t.id: node.value for node in ast.parse(source).body if isinstance(node, ast.Assign)
                for t in node.targets if isinstance(t, ast.Name)}
    templates = {key: [_template(e) for e in assigned[var].elts] for key, var in NAMES.items()}
    classnames = [ast.literal_eval(e) for e in assigned["IMAGENET_CLASSNAMES"].elts]
    if len(templates["openai80"]) != 80 or len(templates["openai7"]) != 7 or len(classnames) != 1000:
        raise SystemExit("expected 80 and 7 templates and 1000 class names")
    return {"templates": templates, "classnames": classnames}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("source", type=Path, help="open_clip's src/open_clip/zero_shot_metadata.py")
    p.add_argument("--commit", required=True, help="the open_clip commit the file was taken from")
    p.add_argument("--license", type=Path, required=True, help="open_clip's LICENSE, copied beside the data")
    args = p.parse_args()
    text = args.source.read_text(encoding="utf-8")
    data = {
        "source": f"mlfoundations/open_clip@{args.commit} src/open_clip/zero_shot_metadata.py "
                  f"(sha256 {hashlib.sha256(text.encode()).hexdigest()}), from openai/CLIP "
                  "notebooks/Prompt_Engineering_for_ImageNet.ipynb",
        "license": "MIT (open_clip: LICENSE.open_clip; openai/CLIP: MIT)",
        **read_metadata(text),
    }
    out = ASSETS / "openai_imagenet_zeroshot.json"
    out.write_text(json.dumps(data, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    (ASSETS / "LICENSE.open_clip").write_text(args.license.read_text(encoding="utf-8"), encoding="utf-8")
    print(f"wrote {out} and {ASSETS / 'LICENSE.open_clip'}")


if __name__ == "__main__":
    main()
