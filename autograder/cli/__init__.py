"""The command line's groups of commands, each a module of thin handlers with their options written above
them (commands.command): grading.py (grade, grade-class, serve, check-server), scale.py (merge,
grade-slurm, k8s-manifests), delivery.py (gradescope, collect-push, post-push, student-kit, variants,
variant-secret, gradescope-zip), lms.py (export-lms, lms-keys, lms-push), course.py (report,
new-exercise, manual-score, release).  autograder/__main__.py makes the command line of them."""
