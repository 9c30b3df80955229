#!/usr/bin/env bash
echo "installing AFL++ (stub)"
