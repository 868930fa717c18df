"""Tags the wheel for the one platform its extension binary runs on, as DuckDB's own
duckdb-extension-* wheels are tagged (py3-none-manylinux2014_x86_64, Root-Is-Purelib)."""

from hatchling.builders.hooks.plugin.interface import BuildHookInterface


class PlatformTag(BuildHookInterface):
    def initialize(self, version, build_data):
        build_data["tag"] = "py3-none-manylinux2014_x86_64"
