from infra.rehearsal.main import main

raise SystemExit(main())
