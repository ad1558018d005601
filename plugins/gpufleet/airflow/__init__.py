"""The Airflow layer: operators, triggers, notifiers, assets and the DAG helpers.

With the DAG files and the plugin file, the only code that imports Airflow. Operators are
thin (``template_fields``, ``execute`` that waits or defers, ``execute_complete`` that raises on
an error event) and adapt ``gpufleet.services``; triggers take plain JSON kwargs and create
nothing. May import every layer below (services, backends, manifests, store, config, domain,
parsing); never ``gpufleet.cli``.
"""
