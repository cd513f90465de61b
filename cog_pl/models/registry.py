"""The table of backbones by name, the one parser of model names, and registering into the table.

Every name :func:`~cog_pl.models.build_backbone` builds is read by :func:`parse_model_name` (as timm's
``_factory.parse_model_name``): a name of :data:`BACKBONES` (no prefix), or ``<source>:<name>`` for a source that
names architectures itself (``timm:``, ``torchvision:``, ``external:`` a registered architecture's name or a
builder's import path ``<module>:<function>``, ``open_clip:`` a model of ``open_clip_torch``). Each entry of
:data:`BACKBONES` is a :class:`BackboneSpec` that carries its builder (:attr:`BackboneSpec.builder`) unless its
architecture's source builds it, and its text tower where it has one (:attr:`BackboneSpec.text_tower`). The
paper's models, ``efficientnet_lite0`` and the demo's CNN are entries of :mod:`cog_pl.models.zoo`, registered against
this table when :mod:`cog_pl.models` is imported; users add theirs with :func:`register_backbone` or an installed
package's :data:`ENTRY_POINT_GROUP` entry point. :func:`list_backbones` lists exactly the names the table resolves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any

from cog_pl.errors import CogError, MissingDependencyError, UnknownNameError, WrongTypeError
from cog_pl.io import digest
from cog_pl.registry import Registry, did_you_mean, plugins

if TYPE_CHECKING:
    from cog_pl.data.transforms import TransformConfig

__all__ = ["BACKBONES", "CLIP_MEAN", "CLIP_STD", "ENTRY_POINT_GROUP", "IMAGENET_MEAN", "IMAGENET_STD",
           "OPEN_CLIP_TEXT_TOWER", "SOURCES", "USER_LAYOUT", "BackboneSpec", "Layout", "Published", "add_spec",
           "check_open_clip_name", "has_text_tower", "import_open_clip", "list_backbones", "list_text_towers",
           "load_entry_points", "parse_model_name", "register_architecture", "register_backbone", "resolve_spec",
           "seen_of_timm_tag", "unregister_backbone"]

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
#: naver/cog configs/clip.yaml (openai/CLIP clip.py ``_transform``); also open_clip's default (``constants.py``
#: ``OPENAI_DATASET_MEAN``/``STD``)
CLIP_MEAN = (0.48145466, 0.4578275, 0.40821073)
CLIP_STD = (0.26862954, 0.26130258, 0.27577711)


@dataclass(frozen=True)
class Layout:
    """How a file holds a backbone's weights.

    ``container``: the keys leading from the unpickled object to the tensor dict (``()``: the file is the tensor dict
    itself; ``None``: search the usual containers, for users' files). ``prefix``: kept and stripped from the keys (the
    authors' wrapper); keys outside it are other networks or training state, dropped and logged. ``heads``: key
    prefixes (after stripping) of heads that are not part of the backbone, dropped and logged. ``key_map``: (regex,
    replacement) renames applied after that, for converters whose names differ from the architecture's.
    ``convert``: ``"module:function"`` mapping the tensor dict onto the architecture's names, where regexes do not
    suffice. ``trust``: why the file cannot be read with ``weights_only=True`` (``None``: it can).
    """

    container: tuple[str, ...] | None = ()
    prefix: str = ""
    heads: tuple[str, ...] = ()
    key_map: tuple[tuple[str, str], ...] | str = ()  # or "module:NAME" of such a table
    convert: str | None = None
    trust: str | None = None
    source: str = ""  # where the layout is established (the publisher's saving code)


@dataclass(frozen=True)
class Published:
    """Where a model's authors publish its file: a direct ``url``, or ``manual`` steps (a login, a conversion)."""

    file: str
    url: str | None = None
    manual: str | None = None
    conversion: str | None = None  # the one-time conversion a user runs before cog_pl can read it
    sha256_prefix: str | None = None  # a digest prefix stated by the publisher other than in the file name
    member: str | None = None  # the file inside a zip archive at ``url``


@dataclass(frozen=True)
class BackboneSpec:
    """How to build one backbone, read its published file and take the paper's features."""

    name: str
    arch: str
    feature_dim: int
    image_size: int = 224
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    feature: str = "penultimate"
    layout: Layout = field(default_factory=Layout)
    bgr: bool = False  # the network takes BGR input (pycls): the channels of the normalised image are flipped
    group: str = "architecture"
    paper_name: str = ""
    published: Published | None = None
    note: str = ""
    external: bool = False  # the architecture is the user's: a builder must be registered
    timm_kwargs: dict = field(default_factory=dict)
    seen: str | None = "in1k"  # the pretraining label set (a named seen set), None when unknown
    #: what builds the network, where its architecture's source does not (``timm:``, ``torchvision:``): a function of
    #: no arguments returning a module, or its import path ``"module:function"`` (cog_pl's own architectures, whose
    #: modules import optional packages); not part of :meth:`definition`, which the architecture's name states
    builder: Callable[[], Any] | str | None = field(default=None, compare=False, repr=False)
    #: what builds the model's text tower from the same weights, ``"module:function"`` (called with the model name,
    #: the weights and the trust opt-in; :func:`cog_pl.models.text.build_text_tower`), None for an image-only
    #: backbone; not part of :meth:`definition`: the image features do not depend on it
    text_tower: str | None = None

    @property
    def prefix(self) -> str:
        return self.layout.prefix

    @property
    def ignore(self) -> tuple[str, ...]:
        return self.layout.heads

    def definition(self, transform: TransformConfig | None = None) -> str:
        """What makes this spec's features, as recorded in every store: the feature, the input and a digest of
        everything that decides the numbers (architecture, layout, input), so a store made by another definition
        is never resumed or reused. ``transform`` (a :class:`~cog_pl.data.transforms.TransformConfig`): the input
        pipeline that ran, whose crop is the input size stated (the spec's own ``image_size`` without one)."""
        facts = {k: v for k, v in asdict(replace(self, builder=None)).items()
                 if k not in ("group", "paper_name", "published", "note", "seen", "builder", "text_tower")}
        facts["layout"].pop("source")
        order, spec = "BGR" if self.bgr else "RGB", digest(facts)[:12]
        size = self.image_size if transform is None else transform.crop
        return f"{self.arch} {self.feature} {self.feature_dim}-d, {size} px {order}, spec {spec}"


#: The layout of a user's file: containers searched, no prefix, the usual classifier heads dropped.
USER_LAYOUT = Layout(None, heads=("fc.", "head.", "classifier."))


def seen_of_timm_tag(name: str) -> str | None:
    """The seen set a timm pretrained tag names (``vit_base_patch16_224.augreg_in21k`` -> ``in21k``,
    ``tresnet_m.miil_in21k`` -> ``in21k-p-fall11``, ``*.in12k*`` -> ``in12k``, ``*in1k`` -> ``in1k``); None when
    the name has no tag or the tag names no label set. Fine-tuned tags (``in22k_ft_in1k``) name the pretraining."""
    tag = name.rpartition(".")[2].lower() if "." in name else ""
    if "miil" in tag and "21k" in tag:
        return "in21k-p-fall11"
    for key, seen in (("in21k", "in21k"), ("in22k", "in21k"), ("in12k", "in12k"), ("in1k", "in1k")):
        if key in tag:
            return seen
    return None


#: The sources a model name may be prefixed with: each names architectures itself, so their names need no entry.
#: ``open_clip:<name>``: a model of the PyPI package ``open_clip_torch`` (``open_clip.list_models()``), its weights a
#: file or a pretrained tag given as the checkpoint; its image features are ``encode_image``'s, and it has a text tower.
SOURCES = ("timm", "torchvision", "external", "open_clip")
#: The text tower of every ``open_clip:<name>`` (:attr:`BackboneSpec.text_tower`).
OPEN_CLIP_TEXT_TOWER = "cog_pl.models.arch.openclip_text:build_open_clip_text_tower"


def import_open_clip() -> Any:
    """The ``open_clip`` package (PyPI ``open_clip_torch``), or a one-line refusal saying how to install it."""
    try:
        import open_clip
    except ImportError as err:
        raise MissingDependencyError("open_clip:<name> models come from the PyPI package open_clip_torch: pip install "
                                     "'cog_pl[vlm]'") from err
    return open_clip


def check_open_clip_name(name: str) -> None:
    """Refuse, in one line, ``open_clip:<name>`` when open_clip knows no model ``name`` (``open_clip.list_models()``:
    its own configs and those added with ``open_clip.add_model_config``), naming the closest; before any question
    of weights, which an unknown model cannot have."""
    known = import_open_clip().list_models()
    if name not in known:
        raise UnknownNameError(f"open_clip:{name}: open_clip knows no such model; {did_you_mean(name, known)}"
                               f"open_clip.list_models() names {len(known)} (e.g. {', '.join(known[:4])} ...), and "
                               "open_clip.add_model_config adds one")


def parse_model_name(name: str) -> tuple[str, str]:
    """``(source, name)`` of a model name: ``("", name)`` for a name of the table, ``(source, rest)`` for
    ``<source>:<rest>`` with a source of :data:`SOURCES` (``external:<module>:<function>`` gives
    ``("external", "<module>:<function>")``, ``open_clip:ViT-B-32`` ``("open_clip", "ViT-B-32")``). The one place a
    model name is taken apart.

    Example:
        >>> parse_model_name("timm:resnet10t"), parse_model_name("resnet50")
        (('timm', 'resnet10t'), ('', 'resnet50'))
        >>> parse_model_name("external:mypkg.nets:build")
        ('external', 'mypkg.nets:build')
    """
    source, sep, rest = name.partition(":")
    return (source, rest) if sep and source in SOURCES else ("", name)


#: Every backbone known by name (the "shared registry" of :mod:`cog_pl.registry`): the paper's models,
#: ``efficientnet_lite0`` and the demo's CNNs (:mod:`cog_pl.models.zoo`), then those users register.
BACKBONES: Registry[BackboneSpec] = Registry("model")
#: The entry-point group through which an installed package registers backbones (``name = "module:object"``, the
#: object a :class:`BackboneSpec`, a builder, or a module that registers on import); read on the first unknown name.
ENTRY_POINT_GROUP = "cog_pl.backbones"
_entry_points_loaded = False


def add_spec(name: str, spec: BackboneSpec, *, replace_existing: bool = False) -> BackboneSpec:
    """Put ``spec`` in :data:`BACKBONES` as ``name`` (its ``name`` field set to it); a taken name is refused unless
    ``replace_existing``. :func:`register_backbone` is the public way in."""
    if ":" in name:
        raise CogError(f"backbone name {name!r}: a registered name has no prefix (timm:, torchvision:, external: "
                       "name architectures)")
    return BACKBONES.add(name, spec if spec.name == name else replace(spec, name=name), replace=replace_existing)


def register_backbone(name: str, spec_or_builder: BackboneSpec | Callable[[], Any], *, image_size: int = 224,
                      mean: tuple[float, float, float] = IMAGENET_MEAN, std: tuple[float, float, float] = IMAGENET_STD,
                      seen: str | None = None, replace: bool = False) -> BackboneSpec:
    """Make ``name`` a backbone that every part of cog_pl builds by name, as it does the paper's models.

    Args:
        name: the name (``FeatureExtractor(model=name)``, ``--model name``, ``model: name`` in a config); no prefix.
        spec_or_builder: a :class:`BackboneSpec` (an architecture timm or torchvision builds, a file layout), or a
            function of no arguments returning a module that maps normalised images to features (its classifier
            removed); the feature size is measured the first time it is built.
        image_size: the input size of a builder's backbone (a spec states its own).
        mean: the normalisation mean of a builder's backbone.
        std: the normalisation standard deviation of a builder's backbone.
        seen: the named seen set its pretraining covered (``in1k``...), for the warnings of ``cog-pl run``.
        replace: replace a backbone already registered under ``name`` (the paper's models included).

    Returns:
        The spec registered (a builder's: architecture ``external:<name>``, the builder carried by the entry).

    Example:
        >>> from torch import nn
        >>> from cog_pl.models import build_backbone
        >>> spec = register_backbone("tiny_cnn", lambda: nn.Sequential(nn.Conv2d(3, 8, 3), nn.AdaptiveAvgPool2d(1),
        ...                                                             nn.Flatten()), image_size=32)
        >>> build_backbone("tiny_cnn").spec.feature_dim
        8
        >>> _ = unregister_backbone("tiny_cnn")

    A package registers its backbones for every process, the command line's included, through the entry-point
    group ``cog_pl.backbones`` (:data:`ENTRY_POINT_GROUP`).
    """
    if isinstance(spec_or_builder, BackboneSpec):
        return add_spec(name, spec_or_builder, replace_existing=replace)
    if not callable(spec_or_builder):
        raise WrongTypeError(f"register_backbone({name!r}, ...): expected a BackboneSpec or a builder function, got "
                             f"{type(spec_or_builder).__name__}")
    spec = BackboneSpec(name, f"external:{name}", feature_dim=-1, image_size=image_size, mean=mean, std=std,
                        layout=USER_LAYOUT, group="user", external=True, seen=seen, builder=spec_or_builder)
    return add_spec(name, spec, replace_existing=replace)


def register_architecture(name: str, builder: Callable[[], Any]) -> None:
    """Make ``external:<name>`` (and ``name``) build ``builder``'s network: :func:`register_backbone` with the
    defaults, replacing an architecture registered so before (a name of another architecture is refused).

    The builder returns a module mapping images to features (its classifier already removed). From a config, where
    nothing can be registered first, ``external:<module>:<function>`` imports the builder by its path instead.
    """
    if name in BACKBONES and BACKBONES.get(name).arch != f"external:{name}":
        raise CogError(f"register_architecture({name!r}, ...): {name!r} is the backbone {BACKBONES.get(name).arch}; "
                       "use register_backbone(name, builder, replace=True) to replace it")
    register_backbone(name, builder, replace=True)


def unregister_backbone(name: str) -> BackboneSpec:
    """Remove a registered backbone (tests, plugins replaced at run time); returns its spec."""
    return BACKBONES.remove(name)


def load_entry_points() -> None:
    """Register the backbones of installed packages (the :data:`ENTRY_POINT_GROUP` entry points), once."""
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for name, obj in plugins(ENTRY_POINT_GROUP, "backbone"):
        if name in BACKBONES:
            continue  # the module registered it on import
        if isinstance(obj, BackboneSpec):
            add_spec(name, obj)
        elif callable(obj):
            register_backbone(name, obj)


def list_backbones(group: str | None = None) -> list[str]:
    """The names :func:`~cog_pl.models.build_backbone` knows without a prefix, in registration order: exactly those
    :func:`resolve_spec` resolves to an entry of :data:`BACKBONES`.

    Args:
        group: only those of this group: ``architecture``, ``self-supervised``, ``label-regularization``,
            ``web-data`` (the paper's four), ``extra`` (efficientnet_lite0), ``demo`` (the demo's CNNs) or ``user``
            (registered builders, installed packages' entry points).

    Returns:
        The names, the paper's 31 first; installed packages' entry points are loaded first.

    Example:
        >>> list_backbones("web-data")
        ['semi_sup', 'semi_weakly_sup', 'clip', 'mopro']
    """
    load_entry_points()
    return [n for n in BACKBONES.names() if group is None or BACKBONES.get(n).group == group]


def has_text_tower(name: str) -> bool:
    """Whether the backbone ``name`` carries a text tower (:func:`cog_pl.models.text.build_text_tower` builds it)."""
    return resolve_spec(name).text_tower is not None


def list_text_towers() -> list[str]:
    """The names of :data:`BACKBONES` with a text tower (``clip``...), in registration order; every
    ``open_clip:<name>`` has one too."""
    load_entry_points()
    return [n for n in BACKBONES.names() if BACKBONES.get(n).text_tower is not None]


def _entry(name: str) -> BackboneSpec | None:
    """The entry ``name`` spells (``-`` and case do not matter), installed packages' entry points loaded if needed."""
    for attempt in range(2):
        for key in (name, name.lower().replace("-", "_"), name.lower().replace("-", "")):
            if key in BACKBONES:
                return BACKBONES.get(key)
        if attempt == 0:
            load_entry_points()
    return None


def resolve_spec(name: str) -> BackboneSpec:
    """The spec of a backbone name (:func:`parse_model_name`).

    Args:
        name: a name of :data:`BACKBONES` (a paper model, ``efficientnet_lite0``, a registered backbone; ``-`` and
            case do not matter), or ``timm:<name>`` / ``torchvision:<name>`` / ``external:<name>`` /
            ``open_clip:<name>`` for any other (``external:<name>`` of a registered architecture is its entry).

    Returns:
        The :class:`BackboneSpec`; for a prefixed name, one whose feature size is measured when it is built.

    Raises:
        cog_pl.errors.UnknownNameError: no such name; the message suggests the closest one.

    Example:
        >>> resolve_spec("ResNet-50").feature_dim
        2048
    """
    source, rest = parse_model_name(name)
    if source == "external" and ":" not in rest and (entry := _entry(rest)) is not None and entry.arch == name:
        return entry  # a registered architecture, named by its architecture
    if source == "open_clip":
        return BackboneSpec(rest, name, feature_dim=-1, mean=CLIP_MEAN, std=CLIP_STD, layout=USER_LAYOUT,
                            group="user", seen=None, feature="output", text_tower=OPEN_CLIP_TEXT_TOWER)
    if source:
        return BackboneSpec(name.rsplit(":", 1)[1], name, feature_dim=-1, layout=USER_LAYOUT, group="user",
                            external=source == "external", seen=seen_of_timm_tag(name) if source == "timm" else None)
    entry = _entry(name)
    if entry is None:
        raise BACKBONES.unknown(name, "or timm:<name> / torchvision:<name> / external:<module>:<function> / "
                                     "open_clip:<name>")
    return entry
