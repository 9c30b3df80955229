#!/usr/bin/env bash
echo "install universal-ctags (stub)"
