# The two commands of the README's contract.
#   make demo   run every experiment in quick mode against the embedded PostgreSQL, write report/
#   make test   build everything and run every test (lab experiments in their quick smoke form)

CARGO ?= cargo
PG_CONFIG ?= /usr/lib/postgresql/15/bin/pg_config

.PHONY: demo test loom loom-full miri bench fmt lint clean

# The demo's pk-lookup experiment needs the memopt extension installed into the server, and its
# pipeline experiment the pipeline_flush module for the cells that name it; where that is not
# possible (no server headers, no write access) it reports how and runs the rest.
demo:
	@if [ -x "$(PG_CONFIG)" ] && [ -w "$$($(PG_CONFIG) --pkglibdir)" ] && \
	    [ -d "$$($(PG_CONFIG) --includedir-server)" ]; then \
		$(MAKE) -s -C extension/memopt PG_CONFIG=$(PG_CONFIG) install >/dev/null; \
		$(MAKE) -s -C extension/pipeline_flush PG_CONFIG=$(PG_CONFIG) install >/dev/null || \
			echo "make demo: pipeline_flush not installed (its headers need libkrb5-dev)"; \
	else \
		echo "make demo: memopt and pipeline_flush not installed (needs postgresql-server-dev-15 and write access to $$($(PG_CONFIG) --pkglibdir 2>/dev/null))"; \
	fi
	$(CARGO) run --release -p slipstream-cli -- demo --out report

test:
	extension/memopt/test/run
	$(MAKE) -s -C extension/pipeline_flush PG_CONFIG=$(PG_CONFIG) install >/dev/null
	$(CARGO) build --workspace --all-targets
	$(CARGO) test --workspace
	$(MAKE) loom

# The pool's slot state machine under every interleaving loom explores (its own target
# directory: the cfg flag would otherwise rebuild the main one). `make test` runs the bounded
# form, interleavings with up to 2 preemptions (about 50 s); `make loom-full` allows 3 (about
# 12 minutes on 2 cores): run it after changing slipstream-pool's core.
LOOM_MAX_PREEMPTIONS ?= 2
loom:
	RUSTFLAGS="--cfg loom" LOOM_MAX_PREEMPTIONS=$(LOOM_MAX_PREEMPTIONS) CARGO_TARGET_DIR=target/loom \
		$(CARGO) test -p slipstream-pool --release --lib loom

loom-full:
	$(MAKE) loom LOOM_MAX_PREEMPTIONS=3

# The pool's unsafe thread-local reference cache under Miri: needs a nightly toolchain with the
# miri component (`rustup component add --toolchain nightly miri`), so not part of `make test`.
miri:
	CARGO_TARGET_DIR=target/miri $(CARGO) +nightly miri test -p slipstream-pool --lib local_ref

# Full benchmark runs: not part of CI. Figures go to docs/benchmarks.md.
bench:
	$(CARGO) bench -p slipstream-pg --bench roundtrip
	$(CARGO) run --release -p slipstream-cli -- lab run roundtrip --json report/roundtrip-full.json
	$(CARGO) run --release -p slipstream-cli -- lab run connect --json report/connect-full.json

fmt:
	$(CARGO) fmt --all

lint:
	$(CARGO) fmt --all -- --check
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	RUSTDOCFLAGS="-D warnings" $(CARGO) doc --workspace --no-deps

clean:
	$(CARGO) clean
	rm -rf report
