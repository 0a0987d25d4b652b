"""The client distribution ships only the modules the SDK imports: `kindex.client`, the domain (standard library and
pydantic only, an import-linter contract of the server) and the API's wire models. Everything else under
layers/core/kindex is the server's and stays out, so that the wheel cannot even offer a server import."""

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED_MODULES = {("kindex", "__init__"), ("kindex.api", "__init__"), ("kindex.api", "models")}
SHIPPED_PACKAGES = {"kindex.client", "kindex.domain"}


class ClientModulesOnly(build_py):
    def find_package_modules(self, package, package_dir):
        return [
            (pkg, module, path)
            for pkg, module, path in super().find_package_modules(package, package_dir)
            if pkg in SHIPPED_PACKAGES or (pkg, module) in SHIPPED_MODULES
        ]


setup(cmdclass={"build_py": ClientModulesOnly})
