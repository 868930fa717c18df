# moraine: every target goes through `cargo xtask` (xtask/src/main.rs).
# The cargo target dir lives outside the clone so the ~20 min DuckDB build survives fresh clones.
CARGO_TARGET_DIR ?= $(HOME)/.cache/moraine/target
export CARGO_TARGET_DIR

CARGO ?= cargo

.PHONY: all setup build dist test demo sqltest e2e fmt lint

all: build

setup:
	@$(CARGO) xtask setup

build:
	@$(CARGO) xtask build

# dist/: the extension repository, the wheel and the `moraine` command, from the built extension.
dist:
	@$(CARGO) xtask dist

# Ends with the combined line `N passed, M failed`.
test:
	@$(CARGO) xtask test

demo:
	@$(CARGO) xtask demo

# make sqltest FILTER=harness
sqltest:
	@$(CARGO) xtask sqltest $(FILTER)

# make e2e FILTER=runtime
e2e:
	@$(CARGO) xtask e2e $(FILTER)

SHIM := extension/*.cpp extension/*.hpp
# The pinned one from duckdb/requirements.txt (`make setup`), else whatever is on PATH.
CLANG_FORMAT ?= $(if $(wildcard .venv/bin/clang-format),.venv/bin/clang-format,clang-format)

fmt:
	$(CARGO) fmt --all
	$(CLANG_FORMAT) -i $(SHIM)

# --release for the extension feature: reuses the release DuckDB build instead of a second one.
lint:
	$(CARGO) fmt --all -- --check
	$(CLANG_FORMAT) --dry-run -Werror $(SHIM)
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy --release -p moraine --all-targets --features extension -- -D warnings
