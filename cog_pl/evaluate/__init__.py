"""The evaluation methods, one file each, and the one grid runner that runs any of them.

A method (:class:`Method`) is how a backbone is evaluated on a domain: the tuned linear probe (:mod:`.linear`), the
text-initialised linear probe (:mod:`.text_init`), the k-NN classifier (:mod:`.knn`), the attentive and MLP probes
(:mod:`.heads`), zero-shot (:mod:`.zeroshot`), fine-tuning (:mod:`.finetune`), the attentive probe trained on images
(:mod:`.attentive_images`), or one a user registers. Its file says what its rows depend on, its cells and how it makes
one, and its options (a dataclass whose fields are its ``cog-pl run`` flags); the numerical work is the stages'
(:mod:`cog_pl.probe`, :mod:`cog_pl.finetune`, :mod:`cog_pl.zeroshot`). Which rows to make, refusing rows of other
values, stale rows, claims, the loop over cells and writing rows are :mod:`.grid`'s, the same for every method; a
run's methods over its domains are :mod:`.runner`'s; the table of methods by name is :mod:`.table`'s.

This package imports nothing heavy: a method's numerical modules load when it runs.
"""

from cog_pl.evaluate.method import Cell, Inputs, Job, Method, register_method, unregister_method
from cog_pl.evaluate.table import (
    ENTRY_POINT_GROUP,
    get_method,
    is_frozen,
    is_probe,
    list_methods,
    method_label,
    method_sort_key,
    sort_methods,
    token_methods,
)

__all__ = ["ENTRY_POINT_GROUP", "Cell", "Inputs", "Job", "Method", "get_method", "is_frozen", "is_probe",
           "list_methods", "method_label", "method_sort_key", "register_method", "sort_methods", "token_methods",
           "unregister_method"]
