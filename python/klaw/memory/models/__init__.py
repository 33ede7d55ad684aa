"""The embedding models: where their files come from (`registry`) and the converters
that `klaw model install` runs on their published weights (`e5convert`, `useconvert`,
both building ONNX graphs with `onnxbuild`)."""
