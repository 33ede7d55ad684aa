"""The code sandbox behind `code_execute` (design §6.5, docs/sandbox.md).

policy.py          the limits both backends apply, and the mount whitelist
backend.py         Job, the in-sandbox wrapper, the Backend API
docker_backend.py  Docker through the docker SDK: keep-alive container + exec, or one per run
bwrap.py           bubblewrap: the same policy with namespaces, rlimits and a cgroup
cgroups.py         per-run cgroups (bubblewrap) and OOM-kill counters (both)
outputs.py         /output staged per run, kept per chat under workspace/outputs/
result.py          capped output and the text the model reads
service.py         Sandbox: backend choice, serialised runs, upkeep, status
image.py           `klaw sandbox build`: the image from the Dockerfile or from debootstrap
"""
