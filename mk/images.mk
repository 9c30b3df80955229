# Sandbox images, built without an image registry (see images/README.md).
# Included by the top-level Makefile. Builds need root (debootstrap, chown) and a
# reachable Docker engine; each skips work when the image's recipe hash is current.
#
#   make image        default session image  ($(SANDBOXD_DEFAULT_IMAGE))
#   make test-image   tiny busybox+bash test image ($(SANDBOXD_TEST_IMAGE))
#   make images       both
#   make task-image   a benchmark task image as SWE-bench builds them, FROM the default image
#   make images IMAGES_FORCE=1                       rebuild even when up to date
#   make image SANDBOXD_IMAGE_EXTRA_PACKAGES="build-essential python3-dev"

IMAGES_DIR := $(abspath $(dir $(lastword $(MAKEFILE_LIST)))..)/images

SANDBOXD_DEFAULT_IMAGE ?= sandboxd-default:latest
SANDBOXD_BASE_IMAGE ?= sandboxd-base:bookworm
SANDBOXD_TEST_IMAGE ?= sandboxd-test:latest
SANDBOXD_TASK_IMAGE ?= sandboxd-task:latest
SANDBOXD_TASK_FILES ?= 10000
SANDBOXD_IMAGE_EXTRA_PACKAGES ?=
IMAGES_FORCE ?=

IMAGES_FLAGS := $(if $(filter-out 0 no false,$(IMAGES_FORCE)),--force)

.PHONY: image test-image images task-image

image: ## default session image (debootstrap from the host's apt mirror; no registry)
	SANDBOXD_DEFAULT_IMAGE='$(SANDBOXD_DEFAULT_IMAGE)' \
	SANDBOXD_BASE_IMAGE='$(SANDBOXD_BASE_IMAGE)' \
	SANDBOXD_IMAGE_EXTRA_PACKAGES='$(SANDBOXD_IMAGE_EXTRA_PACKAGES)' \
	  '$(IMAGES_DIR)/build-default-image.sh' $(IMAGES_FLAGS)

test-image: ## tiny busybox+bash test image, in seconds
	SANDBOXD_TEST_IMAGE='$(SANDBOXD_TEST_IMAGE)' \
	  '$(IMAGES_DIR)/build-test-image.sh' $(IMAGES_FLAGS)

images: test-image image ## both images (IMAGES_FORCE=1 rebuilds)

task-image: image ## benchmark task image (/testbed git repo with a bug, /opt/venv, run_tests.sh; USER root) FROM the default image
	SANDBOXD_TASK_IMAGE='$(SANDBOXD_TASK_IMAGE)' \
	SANDBOXD_TASK_FILES='$(SANDBOXD_TASK_FILES)' \
	SANDBOXD_DEFAULT_IMAGE='$(SANDBOXD_DEFAULT_IMAGE)' \
	  '$(IMAGES_DIR)/build-task-image.sh' $(IMAGES_FLAGS)

.PHONY: sidecar-images
sidecar-images: test-image ## MCP sidecar test images (the go-sdk's example servers memory, everything, sse; e2e/mcptestserver) FROM the test image
	SANDBOXD_TEST_IMAGE='$(SANDBOXD_TEST_IMAGE)' \
	  '$(IMAGES_DIR)/build-sidecar-images.sh' $(IMAGES_FLAGS)
