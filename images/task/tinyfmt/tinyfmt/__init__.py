"""A small package installed into the task's virtual environment."""


def fmt_num(x):
    return f"{x:.2f}"
