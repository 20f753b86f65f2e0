"""The only package that reads bfcl-eval: dataset, references, docs, simulators, handler
registry, decoders made safe, and the inference loops generation runs.

Everything is read from the installed, pinned package; nothing is copied into this repository.
The submodules hold the parts (:mod:`.dataset`, :mod:`.simulators`, :mod:`.handlers`,
:mod:`.secure`, :mod:`.loops`); the engine uses them through this package's names
(``from careful_engine.core import bfcl; bfcl.conversations(...)``). :mod:`.dataset` is
imported first: it sets a private ``BFCL_PROJECT_ROOT`` before bfcl-eval is imported.
"""

from careful_engine.core.bfcl.dataset import (
    ANSWER_DIR,
    BFCL_VERSION,
    CATEGORIES,
    CATEGORY_NAMES_HELP,
    CLASS_FILE_PATH_MAPPING,
    CLASSES,
    COLUMN_NAMES,
    DATA_DIR,
    FUNC_DOC_DIR,
    MAXIMUM_STEP_LIMIT,
    PACKAGE_DIR,
    SHORT_NAMES,
    SIM_PACKAGE,
    Conversation,
    all_func_docs,
    category_named,
    category_of,
    conversation,
    conversation_index,
    conversations,
    func_docs,
    function_class,
    installed_version,
    is_long_context,
    short_name,
    sort_key,
)
from careful_engine.core.bfcl.handlers import (
    HandlerSends,
    RegistryEntry,
    UnknownModel,
    close_keys,
    construct,
    handler,
    matching_keys,
    registry,
    registry_key_for_dir,
)
from careful_engine.core.bfcl.loops import (
    base_handler_class,
    claude_handler_class,
    load_dataset_entry,
    make_json_serializable,
    oss_handler_class,
)
from careful_engine.core.bfcl.secure import secure_decoders
from careful_engine.core.bfcl.simulators import (
    bound_arguments,
    clear_executor_instances,
    instance_name,
    is_stateless,
    method_signature,
    plain_deepcopy,
    public_methods,
    scenario_loader,
    seeded_state,
    simulator_class,
)

__all__ = [
    "ANSWER_DIR", "BFCL_VERSION", "CATEGORIES", "CATEGORY_NAMES_HELP", "CLASSES",
    "CLASS_FILE_PATH_MAPPING", "COLUMN_NAMES", "DATA_DIR",
    "FUNC_DOC_DIR", "MAXIMUM_STEP_LIMIT", "PACKAGE_DIR", "SHORT_NAMES", "SIM_PACKAGE",
    "Conversation", "HandlerSends", "RegistryEntry", "UnknownModel", "all_func_docs",
    "base_handler_class", "bound_arguments", "category_named", "category_of",
    "claude_handler_class",
    "clear_executor_instances", "construct", "conversation", "conversation_index", "conversations",
    "func_docs", "function_class", "handler", "installed_version", "instance_name",
    "is_long_context", "is_stateless", "load_dataset_entry", "make_json_serializable",
    "close_keys", "matching_keys", "method_signature", "oss_handler_class", "plain_deepcopy",
    "public_methods", "registry", "registry_key_for_dir", "scenario_loader", "secure_decoders",
    "seeded_state", "short_name", "simulator_class", "sort_key",
]
