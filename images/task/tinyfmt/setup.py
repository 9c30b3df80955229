from setuptools import setup

setup(name="tinyfmt", version="1.0", packages=["tinyfmt"])
