"""Generate the Python gRPC stubs from placement_service/proto/*.proto into placement_service/proto_gen/.

Run with `make protos` after editing a .proto file; the generated files are committed and never edited
by hand.
"""

from __future__ import annotations

import pathlib
import re
import sys

from grpc_tools import protoc  # type: ignore[import-untyped]

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "placement_service" / "proto"
OUT_DIR = ROOT / "placement_service" / "proto_gen"


def main() -> int:
    OUT_DIR.mkdir(exist_ok=True)
    (OUT_DIR / "__init__.py").write_text('"""Generated gRPC stubs (scripts/gen_protos.py); do not edit."""\n')
    protos = sorted(PROTO_DIR.glob("*.proto"))
    for proto in protos:
        rc = protoc.main(
            ["protoc", f"-I{PROTO_DIR}", f"--python_out={OUT_DIR}", f"--pyi_out={OUT_DIR}",
             f"--grpc_python_out={OUT_DIR}", str(proto)]
        )
        if rc != 0:
            print(f"protoc failed on {proto}", file=sys.stderr)
            return rc
        # grpc_tools writes absolute imports ("import harvest_pb2"); make them package-relative.
        grpc_file = OUT_DIR / f"{proto.stem}_pb2_grpc.py"
        text = grpc_file.read_text()
        text = re.sub(rf"^import {proto.stem}_pb2 as", f"from . import {proto.stem}_pb2 as", text, flags=re.M)
        grpc_file.write_text(text)
    print(f"generated stubs for {len(protos)} proto file(s) in {OUT_DIR.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
