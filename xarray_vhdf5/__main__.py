"""``python -m xarray_vhdf5 ARGS`` runs the ``vhdf5`` command (where its script is not on ``PATH``)."""

from .cli import cli

if __name__ == "__main__":
    cli(prog_name="vhdf5")
