"""JSON Schema (drafts 4 to 2020-12) and Pydantic models as grammars (``Grammar.from_json_schema``)."""
