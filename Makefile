# One entry point for set-up and checks; see README.md.
# `make test` on a fresh clone creates .venv, installs the project with its dev
# extras from PyPI and the buf CLI from npm, then runs every check.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
BUF_VERSION := 1.75.0
BUF := .tools/node_modules/.bin/buf
# Azure Blob Storage's emulator, for the azure backend's tests.
AZURITE_VERSION := 3.37.0
AZURITE := .tools/node_modules/.bin/azurite-blob
# Reinstall when the dependencies or the C extensions' sources change.
BUILD_INPUTS := pyproject.toml hatch_build.py $(wildcard services/remotelog/*/_*.c)
STAMP := $(VENV)/.installed-$(shell cat $(BUILD_INPUTS) | sha1sum | cut -c1-12)

.PHONY: setup kafka-lock spark-kafka-jars demo test fuzz chaos lint format typecheck buf-check drift protos plugin-test plugin-docs pytest bench-setup clean

$(STAMP): $(BUILD_INPUTS)
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	REMOTELOG_REQUIRE_EXTENSION=1 $(PY) -m pip install --quiet --disable-pip-version-check -e '.[dev]'
	@rm -f $(VENV)/.installed-* && touch $@

# npm prunes what a --no-save install does not name: every tool is named each time.
NPM_TOOLS := @bufbuild/buf@$(BUF_VERSION) azurite@$(AZURITE_VERSION)
$(BUF) $(AZURITE) &:
	npm install --silent --no-save --no-package-lock --no-audit --no-fund \
		--prefix .tools $(NPM_TOOLS)

# Debian packages the tests start as real servers; installed only if missing.
SYSTEM_TOOLS := .tools/.system-packages
# Apache Kafka's broker jars (jvm/pom.xml pins the version), resolved from Maven Central.
KAFKA_POM := jvm/kafka-broker/pom.xml
KAFKA_LIBS := .tools/kafka/libs
MVN := mvn -q -B -Dstyle.color=never
# Maven's own JVM, bounded like every other the checks start (its default is a quarter of RAM).
export MAVEN_OPTS ?= -Xmx1g

define apt_install_missing
	@command -v $(1) >/dev/null || { \
		echo "installing $(2) (Debian package)"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get install -y -q --no-install-recommends $(2) >/dev/null \
		|| { $$SUDO apt-get update -q >/dev/null && \
		     $$SUDO apt-get install -y -q --no-install-recommends $(2) >/dev/null; } \
		|| echo "could not install $(2)"; }
endef

# One line naming what to install, in place of a stack trace further on.
define require
	@command -v $(1) >/dev/null || { echo "make setup: $(1) not found: install $(2)"; exit 1; }
endef

# Redis for the lease tests; Java 17 for Apache Kafka and Spark; Maven to resolve Kafka's jars.
$(SYSTEM_TOOLS):
	$(call apt_install_missing,redis-server,redis-server)
	$(call apt_install_missing,java,openjdk-17-jre-headless)
	$(call apt_install_missing,mvn,maven)
	$(call require,redis-server,Debian's redis-server)
	$(call require,java,Java 17 (Debian's openjdk-17-jre-headless))
	$(call require,mvn,Maven (Debian's maven))
	@mkdir -p .tools && touch $@

# A pom's runtime dependencies copied into a folder: $(call resolve_jars,pom,folder).
define resolve_jars
	rm -rf $(2)
	$(MVN) -f $(1) dependency:copy-dependencies -DincludeScope=runtime \
		-DoutputDirectory=$(abspath $(2))
	@touch $(2)/.resolved
endef

$(KAFKA_LIBS)/.resolved: $(KAFKA_POM) jvm/pom.xml | $(SYSTEM_TOOLS)
	$(call resolve_jars,$(KAFKA_POM),$(KAFKA_LIBS))

# Apache Kafka at every version the plugin is tested on, and 3.5 (from before tiered
# storage) for the sidecar's tests: jvm/pom.xml lists them, the broker's pom resolves
# each with -Dkafka.version into .tools/kafka-versions/<version>/libs.
pom_property = $(shell sed -n 's:.*<$(1)>\(.*\)</$(1)>.*:\1:p' jvm/pom.xml)
KAFKA_VERSIONS := .tools/kafka-versions
VERSIONED_LIBS := $(foreach version,$(call pom_property,kafka.matrix.versions) \
	$(call pom_property,kafka.sidecar.version),$(KAFKA_VERSIONS)/$(version)/libs/.resolved)

# The lock an installed remotelog fetches Kafka's jars by (services/remotelog/dev/
# kafka-jars.lock): written again after jvm/pom.xml's kafka.version changes; a test
# checks it against $(KAFKA_LIBS).
kafka-lock: $(STAMP) | $(SYSTEM_TOOLS)
	$(VENV)/bin/python scripts/lock_kafka_jars.py

$(KAFKA_VERSIONS)/%/libs/.resolved: $(KAFKA_POM) jvm/pom.xml | $(SYSTEM_TOOLS)
	$(call resolve_jars,$(KAFKA_POM) -Dkafka.version=$*,$(KAFKA_VERSIONS)/$*/libs)

# Spark's own Kafka source, the baseline of the side-by-side tests and bench/spark_vs_kafka.py;
# pyproject.toml pins pyspark to the minor version jvm/spark-kafka/pom.xml names.
SPARK_KAFKA_POM := jvm/spark-kafka/pom.xml
SPARK_KAFKA_JARS := .tools/spark-kafka/jars

$(SPARK_KAFKA_JARS)/.resolved: $(SPARK_KAFKA_POM) jvm/pom.xml | $(SYSTEM_TOOLS)
	$(call resolve_jars,$(SPARK_KAFKA_POM),$(SPARK_KAFKA_JARS))

spark-kafka-jars: $(SPARK_KAFKA_JARS)/.resolved

# The remotelog plugin for Apache Kafka: one shaded jar, its stubs generated from protos/.
PLUGIN := clients/kafka-plugin
PLUGIN_JAR := $(PLUGIN)/target/remotelog-kafka-plugin-0.1.0.jar
PLUGIN_INPUTS := $(PLUGIN)/pom.xml jvm/pom.xml $(shell find $(PLUGIN)/src/main protos -type f)

$(PLUGIN_JAR): $(PLUGIN_INPUTS) | $(SYSTEM_TOOLS)
	$(MVN) -f $(PLUGIN)/pom.xml package -DskipTests
	@touch $@

setup: $(STAMP) $(BUF) $(AZURITE) $(SYSTEM_TOOLS) $(KAFKA_LIBS)/.resolved $(VERSIONED_LIBS) \
	$(SPARK_KAFKA_JARS)/.resolved $(PLUGIN_JAR)

# The main job on embedded defaults: see README.md's quick start.
demo: setup
	$(VENV)/bin/remotelog demo

lint: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache

format: setup
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# Every hand-written package is checked strictly; the generated stubs only through their .pyi.
TYPED_PACKAGES := core kafka fileio process transforms protocol rpc segmentstore metadata coordination scheduler fetch \
	remover recovery dev cli client spark

typecheck: setup
	$(VENV)/bin/mypy $(addprefix -p remotelog.,$(TYPED_PACKAGES))

# Wire compatibility (buf.yaml's breaking rules) against the previous commit's protos;
# a clone with no history (one commit) has nothing to compare against.
buf-check: setup
	$(BUF) lint
	$(BUF) format --diff --exit-code
	if git rev-parse -q --verify HEAD~1 >/dev/null; then \
		$(BUF) breaking --against '.git#ref=HEAD~1'; fi

protos: setup
	$(PY) scripts/gen_protos.py

drift: setup
	$(PY) scripts/gen_protos.py --check

# Kafka with its own LocalTieredStorage, the baseline of bench/kafka_plugin.py (not for the tests).
BENCH_LIBS := .tools/kafka/bench-libs
bench-setup: setup
	rm -rf $(BENCH_LIBS)
	$(MVN) -f jvm/kafka-bench/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
		-DoutputDirectory=$(abspath $(BENCH_LIBS))

# The plugin's JUnit tests (conversions, errors, settings, against in-process gRPC services).
plugin-test: setup
	$(MVN) -f $(PLUGIN)/pom.xml test

# docs/kafka-plugin.md's settings tables, written from the plugin's ConfigDef.
plugin-docs: setup
	$(MVN) -f $(PLUGIN)/pom.xml test -Dtest=SettingsDocsTest -Dsurefire.failIfNoSpecifiedTests=false \
		-Dremotelog.writeDocs=true

# Two workers (pytest-xdist): most of the suite waits on servers, not the CPU. Each
# group (tests/support/scheduling.py: a module, as a rule) runs whole on one worker,
# the slowest handed out first; PYTEST_WORKERS=0 runs everything in one process.
PYTEST_WORKERS ?= 2
pytest: setup
	$(VENV)/bin/pytest -n $(PYTEST_WORKERS) --dist loadscope --no-loadscope-reorder

test: lint typecheck buf-check drift plugin-test pytest

# Every method of every service, fuzzed at length (make test runs a few examples each).
FUZZ_EXAMPLES ?= 10000
fuzz: setup
	FUZZ_EXAMPLES=$(FUZZ_EXAMPLES) $(VENV)/bin/pytest --timeout=0 tests/service/test_fuzz_rpcs.py

# The chaos soak at length (make test runs it for 25 s).
CHAOS_SECONDS ?= 600
chaos: setup
	CHAOS_SECONDS=$(CHAOS_SECONDS) $(VENV)/bin/pytest --timeout=0 -p no:cacheprovider tests/chaos

clean:
	rm -rf $(VENV) .tools .pytest_cache .mypy_cache .ruff_cache dist build $(PLUGIN)/target
